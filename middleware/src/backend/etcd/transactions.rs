//! The pieces etcd transactions are made of here, and reading their answers.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, TxnOp, TxnOpResponse,
    TxnResponse,
};

use crate::backend::BackendError;

/// The header's revision of a transaction's answer.
pub(super) fn revision(answer: &TxnResponse) -> Result<i64, BackendError> {
    answer
        .header()
        .map(|header| header.revision())
        .ok_or_else(|| BackendError::new("etcd answered a transaction without a header"))
}

/// The keys a transaction's `index`th operation (a get) read.
pub(super) fn read(answer: &TxnResponse, index: usize) -> Result<Vec<KeyValue>, BackendError> {
    match answer.op_responses().into_iter().nth(index) {
        Some(TxnOpResponse::Get(mut get)) => Ok(get.take_kvs()),
        _ => Err(BackendError::new(
            "etcd answered a transaction unexpectedly",
        )),
    }
}

/// The create revision of `ours` when the exclusive acquire `answer` answers put them: it
/// succeeded, or (sent again after a leader change) the first key under each lock, which its
/// `else` branch read, is ours — put by a first copy, or by the caller's place in line.
pub(super) fn put_by_us(
    answer: &TxnResponse,
    ours: &[Vec<u8>],
) -> Result<Option<i64>, BackendError> {
    if answer.succeeded() {
        return revision(answer).map(Some);
    }
    let mut put_at = None;
    for (index, key) in ours.iter().enumerate() {
        match read(answer, index)?.first() {
            Some(first) if first.key() == key.as_slice() => {
                put_at = put_at.or(Some(first.create_revision()));
            }
            _ => return Ok(None),
        }
    }
    Ok(put_at)
}

/// Reads the key under `prefix` with the lowest create revision: the holder.
pub(super) fn first_under(prefix: &[u8]) -> TxnOp {
    TxnOp::get(prefix, Some(in_creation_order().with_limit(1)))
}

/// A read of the keys under a prefix in the order they were created, keys only.
pub(super) fn in_creation_order() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_keys_only()
}

/// No key lies under `prefix`: nobody holds the lock or waits for it.
pub(super) fn vacant(prefix: &[u8]) -> Compare {
    Compare::version(prefix, CompareOp::Equal, 0).with_prefix()
}

/// Some key starts with `prefix`.
pub(super) fn occupied(prefix: &[u8]) -> Compare {
    Compare::version(prefix, CompareOp::Greater, 0).with_prefix()
}

/// `key` is there.
pub(super) fn present(key: &[u8]) -> Compare {
    Compare::version(key, CompareOp::Greater, 0)
}
