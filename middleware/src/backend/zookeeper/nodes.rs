//! Where a lock's nodes live and who holds it, read off their names.
//!
//! Each lock is a directory, `<root>/<escaped name>`, created as a container node (the server
//! deletes it once its last child is gone, so no empty directory piles up per key). Every
//! contender creates an ephemeral sequential child named `<kind>-<owner token>-<sequence>`:
//! `x` for an exclusive hold (mutex, writer) or a place in line for one, `s` for a shared hold
//! (reader, permit), `w` for a waiting writer's place among the writers, `i` for a waiting
//! writer's intent, `c` for a waiting reader's claim on the next turn. The server numbers the
//! children of a
//! directory in creation order, so the sequence orders them, as in Curator's recipes.

use std::fmt::Write;

use crate::token::OwnerToken;

/// What a child node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// An exclusive hold, or a place in line for one.
    Exclusive,
    /// A shared hold: a reader or a permit.
    Shared,
    /// A waiting writer's place among the writers: they take the lock in the order of their
    /// places. It holds no place in the line of holds (readers pass it).
    Writer,
    /// A waiting writer's intent: it bars new readers and holds no place in line.
    Intent,
    /// A waiting reader's claim on the next turn: it holds back writers without an intent, and
    /// holds no place in line.
    Claim,
}

impl Kind {
    fn letter(self) -> char {
        match self {
            Kind::Exclusive => 'x',
            Kind::Shared => 's',
            Kind::Writer => 'w',
            Kind::Intent => 'i',
            Kind::Claim => 'c',
        }
    }

    fn from_letter(letter: &str) -> Option<Self> {
        match letter {
            "x" => Some(Kind::Exclusive),
            "s" => Some(Kind::Shared),
            "w" => Some(Kind::Writer),
            "i" => Some(Kind::Intent),
            "c" => Some(Kind::Claim),
            _ => None,
        }
    }

    /// Whether a node of this kind stands in line: holds or waits for the lock.
    pub(super) fn in_line(self) -> bool {
        matches!(self, Kind::Exclusive | Kind::Shared)
    }
}

/// The directory of one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LockDir {
    path: String,
}

impl LockDir {
    /// The directory of lock `name` under `root`. Every byte but letters, digits and
    /// `:_-@+=,~` is escaped as `%XX`, so any name makes one valid node name (no `/`, no `.`
    /// or `..`, no control characters) and two names never share a directory.
    pub(super) fn new(root: &str, name: &str) -> Self {
        let mut path = String::with_capacity(root.len() + name.len() + 1);
        path.push_str(root);
        path.push('/');
        for byte in name.bytes() {
            match byte {
                b'a'..=b'z'
                | b'A'..=b'Z'
                | b'0'..=b'9'
                | b':'
                | b'_'
                | b'-'
                | b'@'
                | b'+'
                | b'='
                | b','
                | b'~' => path.push(char::from(byte)),
                byte => {
                    write!(path, "%{byte:02X}").expect("writing to a String cannot fail");
                }
            }
        }
        Self { path }
    }

    /// The directory's path.
    pub(super) fn path(&self) -> &str {
        &self.path
    }

    /// The directory's own name: the lock name, escaped.
    pub(super) fn escaped_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or_default()
    }

    /// The path `token` creates its `kind` node at: the server appends the sequence.
    pub(super) fn node_prefix(&self, kind: Kind, token: OwnerToken) -> String {
        format!("{}/{}-{token}-", self.path, kind.letter())
    }

    /// The path of the child `node`.
    pub(super) fn child(&self, node: &Node) -> String {
        format!("{}/{}", self.path, node.name)
    }
}

/// The lock name a directory's name stands for (`None` for a name no backend makes).
pub(super) fn unescape(escaped: &str) -> Option<String> {
    let mut name = Vec::with_capacity(escaped.len());
    let mut bytes = escaped.bytes();
    while let Some(byte) = bytes.next() {
        if byte != b'%' {
            name.push(byte);
            continue;
        }
        let hex = [bytes.next()?, bytes.next()?];
        name.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
    }
    String::from_utf8(name).ok()
}

/// The owner prefix of an ephemeral node's path: the path without its sequence (what
/// [`LockDir::node_prefix`] gave to create it).
pub(super) fn owner_prefix(path: &str) -> &str {
    path.trim_end_matches(|c: char| c.is_ascii_digit())
}

/// One child of a lock's directory, as its name says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Node {
    pub(super) kind: Kind,
    pub(super) token: String,
    pub(super) sequence: i64,
    pub(super) name: String,
}

impl Node {
    /// Reads a child's name; `None` for a name no backend creates.
    pub(super) fn parse(name: &str) -> Option<Self> {
        let (kind, rest) = name.split_once('-')?;
        let (token, sequence) = rest.rsplit_once('-')?;
        Some(Self {
            kind: Kind::from_letter(kind)?,
            token: token.to_owned(),
            sequence: sequence.parse().ok()?,
            name: name.to_owned(),
        })
    }

    fn is(&self, kind: Kind, token: OwnerToken) -> bool {
        self.kind == kind && self.token == token.to_string()
    }
}

/// Where an exclusive node stands in its lock's line.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Standing<'a> {
    /// Nothing is ahead of it: the lock is its holder's.
    Holds,
    /// Behind `predecessor` (the node just ahead); `only_one_ahead` when nothing else is.
    Behind {
        predecessor: &'a Node,
        only_one_ahead: bool,
    },
    /// The node is not there (its session expired, or it was deleted).
    Gone,
}

/// The children of a lock's directory, in creation order.
#[derive(Debug, Default)]
pub(super) struct Children(Vec<Node>);

impl Children {
    /// The children named `names` (names no backend creates are left out).
    pub(super) fn new(names: &[String]) -> Self {
        let mut nodes: Vec<Node> = names.iter().filter_map(|name| Node::parse(name)).collect();
        nodes.sort_by_key(|node| node.sequence);
        Self(nodes)
    }

    /// Every child, in creation order.
    pub(super) fn nodes(&self) -> &[Node] {
        &self.0
    }

    /// `token`'s nodes, of any kind.
    pub(super) fn of(&self, token: OwnerToken) -> impl Iterator<Item = &Node> {
        let token = token.to_string();
        self.0.iter().filter(move |node| node.token == token)
    }

    /// `token`'s earliest `kind` node.
    pub(super) fn mine(&self, kind: Kind, token: OwnerToken) -> Option<&Node> {
        self.0.iter().find(|node| node.is(kind, token))
    }

    fn ahead_of(&self, sequence: i64) -> std::slice::Iter<'_, Node> {
        let ahead = self.0.partition_point(|node| node.sequence < sequence);
        self.0[..ahead].iter()
    }

    /// Where the exclusive node numbered `sequence` stands: it holds the lock once no node in
    /// line (exclusive or shared) is ahead of it; intents do not count.
    pub(super) fn exclusive_standing(&self, sequence: i64) -> Standing<'_> {
        if !self.0.iter().any(|node| node.sequence == sequence) {
            return Standing::Gone;
        }
        let mut ahead = self.ahead_of(sequence).filter(|node| node.kind.in_line());
        match ahead.next_back() {
            None => Standing::Holds,
            Some(predecessor) => Standing::Behind {
                predecessor,
                only_one_ahead: ahead.next().is_none(),
            },
        }
    }

    /// What keeps the reader numbered `sequence` out, if anything: the latest exclusive node
    /// or writer's intent ahead of it.
    pub(super) fn reader_blocker(&self, sequence: i64) -> Option<&Node> {
        self.ahead_of(sequence)
            .rfind(|node| matches!(node.kind, Kind::Exclusive | Kind::Intent))
    }

    /// Whether readers alone keep the exclusive node numbered `sequence` out: only shared
    /// holds are in line ahead of it (and some are), and no reader claims a turn (every one
    /// that waited came in).
    pub(super) fn only_readers_ahead(&self, sequence: i64) -> bool {
        let mut ahead = self.ahead_of(sequence).filter(|node| node.kind.in_line());
        let first = ahead.next();
        first.is_some_and(|first| first.kind == Kind::Shared)
            && ahead.all(|node| node.kind == Kind::Shared)
            && self.0.iter().all(|node| node.kind != Kind::Claim)
    }

    /// The place of the writer that goes just before `token` among the writers, if any: the
    /// latest place ahead of `token`'s own, or, while it has none, the latest of all.
    pub(super) fn writer_ahead(&self, token: OwnerToken) -> Option<&Node> {
        let place = |node: &&Node| node.kind == Kind::Writer;
        match self.mine(Kind::Writer, token) {
            Some(mine) => self.ahead_of(mine.sequence).rfind(place),
            None => self.0.iter().rfind(place),
        }
    }

    /// A waiting reader's claim that holds back `token`'s write, if any: readers that waited
    /// go first, unless `token`'s intent bars readers already (a [stale](Self::stale_intent)
    /// one does not).
    pub(super) fn claim_ahead_of_writer(&self, token: OwnerToken) -> Option<&Node> {
        if self.mine(Kind::Intent, token).is_some() && self.stale_intent(token).is_none() {
            return None;
        }
        self.0.iter().find(|node| node.kind == Kind::Claim)
    }

    /// `token`'s intent, if another writer's place is ahead of `token`'s: put by a writer that
    /// read no writer ahead of it while that place was being created. Readers it bars wait for
    /// `token`'s write, which waits for the writer ahead, which (without an intent) waits for
    /// those readers' claims — a deadlock, until the writer withdraws it.
    pub(super) fn stale_intent(&self, token: OwnerToken) -> Option<&Node> {
        self.writer_ahead(token)?;
        self.mine(Kind::Intent, token)
    }

    /// What keeps the permit numbered `sequence` out of a semaphore of `permits` (nothing:
    /// empty): the latest exclusive node ahead of it, else the `permits` shared holds ahead of
    /// it, any of whose release frees a permit.
    pub(super) fn permit_blockers(&self, sequence: i64, permits: u32) -> Vec<&Node> {
        let exclusive = self
            .ahead_of(sequence)
            .rfind(|node| node.kind == Kind::Exclusive);
        if let Some(exclusive) = exclusive {
            return vec![exclusive];
        }
        let permits = usize::try_from(permits).unwrap_or(usize::MAX);
        let holders: Vec<&Node> = (self.ahead_of(sequence))
            .filter(|node| node.kind == Kind::Shared)
            .take(permits)
            .collect();
        match holders.len() >= permits {
            true => holders,
            false => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directorys_name_is_read_back() {
        for name in ["coupon:42", "a/b", "100%", "é ü", ""] {
            let dir = LockDir::new("/root", name);
            assert_eq!(unescape(dir.escaped_name()).as_deref(), Some(name));
        }
        assert_eq!(unescape("%G1"), None);
    }

    fn children(names: &[&str]) -> Children {
        Children::new(
            &names
                .iter()
                .map(|name| (*name).to_owned())
                .collect::<Vec<_>>(),
        )
    }

    fn seq(sequence: i64) -> String {
        format!("{sequence:010}")
    }

    #[test]
    fn a_name_makes_one_valid_node_name_and_no_two_names_share_it() {
        let dir = |name| LockDir::new("/tower-lock", name).path().to_owned();
        assert_eq!(dir("lock:coupon:42"), "/tower-lock/lock:coupon:42");
        assert_eq!(dir("a/b"), "/tower-lock/a%2Fb");
        assert_eq!(dir(".."), "/tower-lock/%2E%2E");
        assert_eq!(dir("%2F"), "/tower-lock/%252F");
        assert_ne!(dir("a/b"), dir("a%2Fb"));
        assert_eq!(dir("é"), "/tower-lock/%C3%A9");
    }

    #[test]
    fn a_nodes_name_says_its_kind_owner_and_place() {
        let token = OwnerToken::new();
        let dir = LockDir::new("/r", "k");
        let path = format!("{}{}", dir.node_prefix(Kind::Shared, token), seq(7));
        let name = path.rsplit('/').next().unwrap();
        let node = Node::parse(name).unwrap();
        assert_eq!(node.kind, Kind::Shared);
        assert_eq!(node.sequence, 7);
        assert!(node.is(Kind::Shared, token));
        assert_eq!(dir.child(&node), path);
        assert_eq!(owner_prefix(&path), dir.node_prefix(Kind::Shared, token));
        assert_eq!(
            Node::parse("lock-0000000001"),
            None,
            "a foreign recipe's node"
        );
    }

    #[test]
    fn the_first_node_in_line_holds_and_each_waiter_is_behind_the_one_before_it() {
        let line = children(&[
            &format!("i-w-{}", seq(1)),
            &format!("x-b-{}", seq(3)),
            &format!("x-a-{}", seq(2)),
            &format!("s-c-{}", seq(4)),
            &format!("x-d-{}", seq(5)),
        ]);
        assert_eq!(
            line.exclusive_standing(2),
            Standing::Holds,
            "intents do not count"
        );
        let Standing::Behind {
            predecessor,
            only_one_ahead,
        } = line.exclusive_standing(3)
        else {
            panic!("the second is behind the first");
        };
        assert_eq!((predecessor.token.as_str(), only_one_ahead), ("a", true));
        let Standing::Behind {
            predecessor,
            only_one_ahead,
        } = line.exclusive_standing(5)
        else {
            panic!("a later one is behind");
        };
        assert_eq!((predecessor.token.as_str(), only_one_ahead), ("c", false));
        assert_eq!(
            line.exclusive_standing(9),
            Standing::Gone,
            "a node not listed"
        );
    }

    #[test]
    fn a_reader_is_kept_out_by_an_earlier_writer_or_intent_only() {
        let line = children(&[
            &format!("s-r-{}", seq(1)),
            &format!("i-w-{}", seq(2)),
            &format!("s-q-{}", seq(3)),
        ]);
        assert_eq!(line.reader_blocker(1), None);
        assert_eq!(line.reader_blocker(3).unwrap().token, "w");
        let line = children(&[&format!("s-r-{}", seq(1)), &format!("x-w-{}", seq(2))]);
        assert_eq!(line.reader_blocker(1), None, "a later writer waits for it");
    }

    #[test]
    fn a_readers_claim_keeps_a_reader_in_and_a_writer_without_intent_out() {
        let writer = OwnerToken::new();
        let line = children(&[
            &format!("x-w-{}", seq(1)),
            &format!("c-r-{}", seq(2)),
            &format!("s-q-{}", seq(3)),
        ]);
        assert_eq!(
            line.reader_blocker(3).unwrap().token,
            "w",
            "claims do not bar"
        );
        assert_eq!(line.claim_ahead_of_writer(writer).unwrap().token, "r");
        let barring = children(&[
            &format!("c-r-{}", seq(1)),
            &format!("i-{writer}-{}", seq(2)),
        ]);
        assert_eq!(
            barring.claim_ahead_of_writer(writer),
            None,
            "its intent bars readers"
        );
        assert_eq!(
            barring.stale_intent(writer),
            None,
            "no writer is ahead of it"
        );
    }

    #[test]
    fn an_intent_put_behind_another_writers_place_is_stale() {
        let writer = OwnerToken::new();
        let line = children(&[
            &format!("w-first-{}", seq(1)),
            &format!("w-{writer}-{}", seq(2)),
            &format!("i-{writer}-{}", seq(3)),
            &format!("c-r-{}", seq(4)),
        ]);
        assert_eq!(line.stale_intent(writer).unwrap().sequence, 3);
        assert_eq!(
            line.claim_ahead_of_writer(writer).unwrap().token,
            "r",
            "a stale intent bars no reader"
        );
    }

    #[test]
    fn a_writer_leaves_an_intent_only_when_readers_alone_keep_it_out() {
        let readers = children(&[
            &format!("s-a-{}", seq(1)),
            &format!("i-v-{}", seq(2)),
            &format!("s-b-{}", seq(3)),
        ]);
        assert!(readers.only_readers_ahead(4));
        let claimed = children(&[&format!("s-a-{}", seq(1)), &format!("c-r-{}", seq(2))]);
        assert!(!claimed.only_readers_ahead(3), "a reader still to come in");
        let writer = children(&[&format!("s-a-{}", seq(1)), &format!("x-w-{}", seq(2))]);
        assert!(!writer.only_readers_ahead(3), "a writer ahead");
        assert!(!writer.only_readers_ahead(1), "nothing ahead");
    }

    #[test]
    fn a_writer_goes_after_the_writers_whose_places_came_before_its_own() {
        let (first, second) = (OwnerToken::new(), OwnerToken::new());
        let line = children(&[
            &format!("w-{first}-{}", seq(2)),
            &format!("x-h-{}", seq(1)),
            &format!("w-{second}-{}", seq(4)),
            &format!("s-r-{}", seq(3)),
        ]);
        assert_eq!(line.writer_ahead(first), None, "the first place");
        assert_eq!(line.writer_ahead(second).unwrap().token, first.to_string());
        let newcomer = OwnerToken::new();
        assert_eq!(
            line.writer_ahead(newcomer).unwrap().token,
            second.to_string(),
            "without a place, behind the last one"
        );
        assert_eq!(
            line.exclusive_standing(1),
            Standing::Holds,
            "places hold no place in the line of holds"
        );
        assert_eq!(
            line.reader_blocker(3).unwrap().token,
            "h",
            "readers pass places"
        );
    }

    #[test]
    fn a_permit_is_kept_out_by_as_many_holders_as_permits_or_an_exclusive_node() {
        let line = children(&[
            &format!("s-a-{}", seq(1)),
            &format!("s-b-{}", seq(2)),
            &format!("s-c-{}", seq(3)),
        ]);
        let tokens = |blockers: Vec<&Node>| -> Vec<String> {
            blockers.iter().map(|node| node.token.clone()).collect()
        };
        assert!(line.permit_blockers(2, 2).is_empty());
        assert_eq!(tokens(line.permit_blockers(3, 2)), ["a", "b"]);
        assert!(line.permit_blockers(3, 3).is_empty());
        let line = children(&[&format!("x-m-{}", seq(1)), &format!("s-a-{}", seq(2))]);
        assert_eq!(tokens(line.permit_blockers(2, 5)), ["m"]);
    }

    #[test]
    fn a_tokens_nodes_are_found_by_kind() {
        let token = OwnerToken::new();
        let line = children(&[
            &format!("x-{token}-{}", seq(4)),
            &format!("i-{token}-{}", seq(2)),
            &format!("x-other-{}", seq(1)),
        ]);
        assert_eq!(line.mine(Kind::Exclusive, token).unwrap().sequence, 4);
        assert_eq!(line.mine(Kind::Intent, token).unwrap().sequence, 2);
        assert_eq!(line.mine(Kind::Shared, token), None);
        assert_eq!(line.of(token).count(), 2);
    }
}
