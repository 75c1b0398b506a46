//! bincode 2 encoding of what the log, the snapshots and the masters' transport carry: the
//! log's entries and its messages are encoded one way, here, so that the simulator counts the
//! bytes a log would hold.

use serde::Serialize;
use serde::de::DeserializeOwned;

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes `value`.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = Vec::new();
    encode_into(value, &mut bytes);
    bytes
}

/// Encodes `value` after what `bytes` already holds (a snapshot's format byte).
pub fn encode_into<T: Serialize>(value: &T, bytes: &mut Vec<u8>) {
    bincode::serde::encode_into_std_write(value, bytes, config())
        .expect("writing to a Vec cannot fail");
}

/// How many bytes [`encode`] makes of `value`, without making them.
pub fn encoded_len<T: Serialize>(value: &T) -> usize {
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(value, &mut size, config())
        .expect("counting bytes cannot fail");
    size.bytes_written
}

/// The most bytes a value may claim while it decodes: a corrupted or hostile length must be
/// an error, not an attempt to allocate it.
const DECODE_LIMIT: usize = 1 << 30;

/// Decodes the `T` that `bytes` start with, and how many bytes it took.
pub fn decode_counted<T: DeserializeOwned>(
    bytes: &[u8],
) -> Result<(T, usize), bincode::error::DecodeError> {
    let limited = config().with_limit::<DECODE_LIMIT>();
    bincode::serde::decode_from_slice(bytes, limited)
}

/// Decodes the `T` that `bytes` start with, whatever follows it: the head of a larger
/// value, read without decoding the rest.
pub fn decode_head<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::error::DecodeError> {
    Ok(decode_counted(bytes)?.0)
}

/// Decodes a whole `T` from `bytes`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::error::DecodeError> {
    let (value, read) = decode_counted(bytes)?;
    if read != bytes.len() {
        return Err(bincode::error::DecodeError::OtherString(format!(
            "{} trailing bytes",
            bytes.len() - read
        )));
    }
    Ok(value)
}
