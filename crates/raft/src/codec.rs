//! bincode 2 encoding of what the log, the snapshots and the transport carry.

use serde::Serialize;
use serde::de::DeserializeOwned;

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes `value`.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, config()).expect("encoding into a Vec cannot fail")
}

/// Decodes a whole `T` from `bytes`.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::error::DecodeError> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, config())?;
    if read != bytes.len() {
        return Err(bincode::error::DecodeError::OtherString(format!(
            "{} trailing bytes",
            bytes.len() - read
        )));
    }
    Ok(value)
}
