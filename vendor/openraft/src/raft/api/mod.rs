pub(crate) mod app;
pub(crate) mod management;
pub(crate) mod protocol;
