//! Compiles `proto/muster/v1` (and the slice of etcd's API the benchmark comparison drives)
//! with protox, so building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let files = [
        "muster/v1/types.proto",
        "muster/v1/raft.proto",
        "muster/v1/cluster.proto",
        "muster/v1/worker.proto",
        "muster/v1/app.proto",
        "muster/v1/driver.proto",
        "etcd/kv.proto",
    ];
    let descriptors = protox::compile(files, [&root])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
