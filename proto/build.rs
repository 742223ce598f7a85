//! Compiles the .proto files with the protoc shipped by `protoc-bin-vendored`,
//! so a fresh machine without `protoc` builds the workspace.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY-free: build scripts are single-threaded; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let protos = ["palisade/v1/palisade.proto", "palisade/peer/v1/peer.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    // Decode errors become INVALID_ARGUMENT with an ErrorInfo (src/codec.rs).
    tonic_prost_build::configure()
        .codec_path("crate::codec::PalisadeCodec")
        .compile_protos(&protos, &["."])?;
    Ok(())
}
