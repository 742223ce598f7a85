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
    // The server side once more, for `src/encoded.rs`: WatchSandboxes
    // answers with events encoded once (`EncodedSandboxEvent`), every other
    // type is the one generated above (prost generates no message for an
    // extern type: this output holds only the two servers). Same wire
    // format, same service.
    let encoded_dir = out_dir.join("encoded");
    std::fs::create_dir_all(&encoded_dir)?;
    tonic_prost_build::configure()
        .build_client(false)
        .out_dir(&encoded_dir)
        .extern_path(".palisade.v1", "crate::v1")
        .extern_path(
            ".palisade.v1.SandboxEvent",
            "crate::encoded::EncodedSandboxEvent",
        )
        .codec_path("crate::codec::PalisadeCodec")
        .compile_protos(&["palisade/v1/palisade.proto"], &["."])?;
    Ok(())
}
