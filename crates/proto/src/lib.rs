//! Muster's gRPC contract, generated from `proto/muster/v1` at build time, and the one way to
//! find the leading master ([`discovery`]).

pub mod discovery;

/// Package `muster.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("muster.v1");
}
