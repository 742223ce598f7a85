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
    // The descriptor set feeds gRPC server reflection (`tonic-reflection`),
    // so generic clients can list and call the services without the files.
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("palisade_descriptor.bin"))
        .codec_path("crate::codec::PalisadeCodec")
        .compile_protos(&protos, &["."])?;
    Ok(())
}
