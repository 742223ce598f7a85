//! The codec every generated service and client uses: prost's, except that
//! a message that does not decode (a string that is not UTF-8, a wrong wire
//! type, a truncated field) is INVALID_ARGUMENT with a
//! `google.rpc.ErrorInfo` whose reason is [`MALFORMED_MESSAGE`], not
//! prost's INTERNAL without details. A malformed request is the caller's
//! mistake: it must not look like a server failure, which clients retry.
//!
//! (The codec cannot tell a request from a response; a response that does
//! not decode gets the same status on the client side. Palisade's servers
//! only send messages prost encoded.)

use std::collections::HashMap;
use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};
use tonic_types::{ErrorDetails, StatusExt as _};

use crate::ERROR_DOMAIN;

/// Reason: the message is not a well-formed, uncompressed gRPC message of
/// the method's type.
pub const MALFORMED_MESSAGE: &str = "MALFORMED_MESSAGE";

/// INVALID_ARGUMENT / [`MALFORMED_MESSAGE`] saying what is wrong.
pub fn malformed(problem: impl Into<String>) -> tonic::Status {
    tonic::Status::with_error_details(
        tonic::Code::InvalidArgument,
        problem,
        ErrorDetails::with_error_info(MALFORMED_MESSAGE, ERROR_DOMAIN, HashMap::new()),
    )
}

/// prost's codec with [`malformed`] decode errors. See the module doc.
#[derive(Debug, Clone)]
pub struct PalisadeCodec<T, U> {
    _types: PhantomData<(T, U)>,
}

impl<T, U> Default for PalisadeCodec<T, U> {
    fn default() -> Self {
        Self {
            _types: PhantomData,
        }
    }
}

impl<T, U> Codec for PalisadeCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = PalisadeDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        PalisadeDecoder(ProstCodec::<T, U>::default().decoder())
    }
}

/// prost's decoder with [`malformed`] errors.
#[derive(Debug)]
pub struct PalisadeDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for PalisadeDecoder<U> {
    type Item = U;
    type Error = tonic::Status;

    fn decode(&mut self, buffer: &mut DecodeBuf<'_>) -> Result<Option<U>, tonic::Status> {
        self.0.decode(buffer).map_err(|status| {
            if status.get_details_error_info().is_some() {
                status
            } else {
                malformed(status.message())
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
