//! What a release announcement says about the lock's next holder.

use crate::backend::FencingToken;
use crate::token::OwnerToken;

/// What a release announcement says about the lock's next holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Announcement {
    /// Anybody may take it: every waiter for the lock is woken.
    Free,
    /// Only the waiter holding this ticket may take it next: only it is woken (and the first
    /// local waiter that holds no ticket yet, so that it takes one).
    Next(OwnerToken),
    /// The release handed the lock to this ticket: its waiter holds it, with this fence, on
    /// hearing the announcement (the lease of [`QueuedAttempt::Queued`]'s `handover`).
    ///
    /// [`QueuedAttempt::Queued`]: crate::backend::QueuedAttempt::Queued
    Handed {
        /// The ticket that now holds the lock.
        to: OwnerToken,
        /// Its fencing token, when the backend fences.
        fence: Option<FencingToken>,
    },
}

impl Announcement {
    /// The announcement as a store's message carries it: `""` (free), `"<ticket>"` (next) or
    /// `"<ticket> <fence>"` (handed; fence 0 when the backend does not fence).
    ///
    /// # Example
    ///
    /// ```
    /// use tower_lock::backend::OwnerToken;
    /// use tower_lock::backend::waiting::Announcement;
    ///
    /// let next = Announcement::Next(OwnerToken::new());
    /// assert_eq!(Announcement::parse(&next.message()), Some(next));
    /// assert_eq!(Announcement::Free.message(), "");
    /// ```
    pub fn message(&self) -> String {
        match self {
            Self::Free => String::new(),
            Self::Next(ticket) => ticket.to_string(),
            Self::Handed { to, fence } => format!("{to} {}", fence.map_or(0, u64::from)),
        }
    }

    /// Reads a [`message`](Self::message); `None` when it is none of the three forms.
    pub fn parse(message: &str) -> Option<Self> {
        match message.split_once(' ') {
            None if message.is_empty() => Some(Self::Free),
            None => OwnerToken::parse(message).map(Self::Next),
            Some((to, fence)) => Some(Self::Handed {
                to: OwnerToken::parse(to)?,
                fence: Some(fence.parse::<u64>().ok()?)
                    .filter(|fence| *fence > 0)
                    .map(FencingToken::new),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_are_read_from_their_messages() {
        let token = OwnerToken::new();
        let text = token.to_string();

        assert_eq!(Announcement::parse(""), Some(Announcement::Free));
        assert_eq!(Announcement::parse(&text), Some(Announcement::Next(token)));
        let handed = Announcement::Handed {
            to: token,
            fence: Some(FencingToken::new(42)),
        };
        assert_eq!(Announcement::parse(&format!("{text} 42")), Some(handed));
        assert_eq!(Announcement::parse(&handed.message()), Some(handed));
        assert_eq!(
            Announcement::parse(&format!("{text} 0")),
            Some(Announcement::Handed {
                to: token,
                fence: None
            }),
            "fencing off"
        );
        assert_eq!(Announcement::parse("not-a-token"), None);
        assert_eq!(Announcement::parse(&format!("{text} -1")), None);
    }
}
