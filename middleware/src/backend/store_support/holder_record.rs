//! A holder's record for an operator, as the stores whose keys or nodes carry a value keep it
//! (etcd's contender keys, ZooKeeper's nodes): `<since ms> <hold> <label>` — when it asked
//! (ms since the epoch, by the asking process's clock), how it holds (`m` a mutex, `w` a
//! writer, `r` a reader, `p<permits>` a permit) and its locker's label.

use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::{Hold, LockRequest};

/// The record of `request` asking to hold as `hold`, now.
pub(in crate::backend) fn record(request: &LockRequest, hold: Hold) -> Vec<u8> {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let hold = match hold {
        Hold::Mutex => "m".to_owned(),
        Hold::Write => "w".to_owned(),
        Hold::Read => "r".to_owned(),
        Hold::Permit { permits } => format!("p{permits}"),
    };
    format!("{since} {hold} {}", request.holder).into_bytes()
}

/// A record read back: how it holds, its label, and how long ago it asked (by this process's
/// clock). `None` for a value that is no record.
pub(in crate::backend) fn parse(value: &[u8]) -> Option<(Hold, String, Duration)> {
    let text = std::str::from_utf8(value).ok()?;
    let mut fields = text.splitn(3, ' ');
    let since: u64 = fields.next()?.parse().ok()?;
    let hold = match fields.next()? {
        "m" => Hold::Mutex,
        "w" => Hold::Write,
        "r" => Hold::Read,
        permits => Hold::Permit {
            permits: permits.strip_prefix('p')?.parse::<NonZeroU32>().ok()?,
        },
    };
    let label = fields.next().unwrap_or_default().to_owned();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let asked_ago = now.saturating_sub(Duration::from_millis(since));
    Some((hold, label, asked_ago))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::OwnerToken;

    #[test]
    fn a_record_is_read_back() {
        let request =
            LockRequest::new(OwnerToken::new(), Duration::from_secs(1)).holder("web-1 eu");
        let permits = Hold::Permit {
            permits: NonZeroU32::new(3).unwrap(),
        };
        for hold in [Hold::Mutex, Hold::Write, Hold::Read, permits] {
            let (read, label, ago) = parse(&record(&request, hold)).expect("a record");
            assert_eq!((read, label.as_str()), (hold, "web-1 eu"));
            assert!(ago < Duration::from_secs(5));
        }
        assert!(parse(b"").is_none());
        assert!(parse(b"12 q x").is_none());
    }
}
