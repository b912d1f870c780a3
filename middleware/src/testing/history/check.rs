//! Reads the holds processes recorded (`record_to`, [`Recording`](super::Recording)) and checks them: every
//! pair of holds of one lock that overlapped in time where one of them was exclusive (a mutex,
//! a writer, several keys at once: readers share), split by whether fencing kept the stale
//! holder's writes out; and every moment a semaphore had more holders than permits.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// One hold of one lock name, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Hold {
    name: String,
    pid: u64,
    number: u64,
    exclusive: bool,
    /// A semaphore's permits, for a permit's hold.
    permits: Option<u64>,
    fence: Option<u64>,
    /// Nanoseconds since the Unix epoch.
    granted: u128,
    /// `None` while no end was recorded: the process died holding it.
    ended: Option<u128>,
    /// Whether the holder was told that its lease was lost (at any time).
    reported_lost: bool,
    /// Whether it was told so by its end: its end said the lease was gone, or a loss was
    /// reported before it.
    reported_by_end: bool,
    /// When it was first told so, if it was.
    told_at: Option<u128>,
}

/// How long one holder believed it held one lock name: from its grant until it ended or was
/// told that its lease was lost, whichever came first (see [`History::beliefs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Belief {
    /// The holder's process.
    pub pid: u64,
    /// The hold's number in its process.
    pub hold: u64,
    /// The lock name.
    pub name: String,
    /// Its fencing token, if it had one.
    pub fence: Option<u64>,
    /// Nanoseconds, on the recording's clock.
    pub from: u128,
    /// `None`: the holder never ended the hold nor was told (held at the run's end).
    pub until: Option<u128>,
}

/// The recorded holds of every process of a run.
#[derive(Debug, Default)]
pub struct History {
    /// One per lock name a grant held.
    holds: Vec<Hold>,
    /// When the run ended, if known: the time since each name's last grant counts as a gap.
    ran_until: Option<u128>,
    /// Grants by shape.
    shapes: BTreeMap<String, usize>,
    /// Whether only a loss told by a hold's end counts as told.
    told_by_end: bool,
}

/// What [`History::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Holds granted, of every shape (several keys at once count once).
    pub holds: usize,
    /// Grants by shape: `mutex`, `read`, `write`, `permit`, and `keys` for several at once.
    pub shapes: BTreeMap<String, usize>,
    /// Moments a semaphore had more holders than permits (each counted in `unfenced_reported`
    /// when one of the holders had been told its lease was lost, else in
    /// `unfenced_unreported`).
    pub permits_exceeded: usize,
    /// Pairs of holds of one name that overlapped in time with different fences: a store
    /// checking fences refuses the stale holder's (the smaller fence's) writes once the newer
    /// holder's were seen.
    pub fenced_overlaps: usize,
    /// Overlapping pairs without that protection whose stale holder was told its lease was
    /// lost: the lease-expiry window, which fencing exists to close.
    pub unfenced_reported: usize,
    /// Overlapping pairs without that protection whose stale holder was never told: two
    /// holders that both believed they held the lock. Always a bug.
    pub unfenced_unreported: usize,
    /// The first few of those, described.
    pub examples: Vec<String>,
    /// The longest time one lock name went without a grant (up to the end of the run, when
    /// [known](History::ran_until)).
    pub longest_gap: Duration,
    /// When that gap began: the grant before it, in nanoseconds since the Unix epoch.
    pub longest_gap_from: u128,
}

impl History {
    /// Reads the `files` the processes of a run recorded, one per process.
    ///
    /// # Errors
    ///
    /// A file that cannot be read, or a line that is not a recorded event.
    pub fn read(files: &[impl AsRef<Path>]) -> Result<Self, String> {
        let mut history = Self::default();
        for file in files {
            let file = file.as_ref();
            let text =
                std::fs::read_to_string(file).map_err(|error| format!("{file:?}: {error}"))?;
            history
                .add(&text)
                .map_err(|error| format!("{file:?}: {error}"))?;
        }
        Ok(history)
    }

    /// Adds one process's recording (its lines).
    ///
    /// # Errors
    ///
    /// A line that is not a recorded event.
    pub fn add(&mut self, lines: &str) -> Result<(), String> {
        // Per hold number: where its names' holds are.
        let mut recorded: HashMap<u64, Vec<usize>> = HashMap::new();
        for line in lines.lines().filter(|line| !line.trim().is_empty()) {
            let event: Value =
                serde_json::from_str(line).map_err(|error| format!("{error} in {line:?}"))?;
            let number = |field: &str| event[field].as_u64();
            let (Some(pid), Some(at)) = (number("pid"), number("at").map(u128::from)) else {
                return Err(format!("an event without pid or at: {line:?}"));
            };
            if let Some(hold) = number("grant") {
                let names = parse_names(&event).ok_or_else(|| format!("no names: {line:?}"))?;
                let kind = event["hold"].as_str().unwrap_or("unknown");
                let shape = if names.len() > 1 { "keys" } else { kind };
                *self.shapes.entry(shape.to_owned()).or_default() += 1;
                let exclusive = matches!(kind, "mutex" | "write");
                let permits = number("permits");
                let first = self.holds.len();
                self.holds
                    .extend(names.into_iter().map(|(name, fence)| Hold {
                        name,
                        pid,
                        number: hold,
                        exclusive,
                        permits,
                        fence,
                        granted: at,
                        ended: None,
                        reported_lost: false,
                        reported_by_end: false,
                        told_at: None,
                    }));
                recorded.insert(hold, (first..self.holds.len()).collect());
            } else if let Some(hold) = number("end").or(number("lost")) {
                let ends = number("end").is_some();
                let lost = !ends || event["held"] == Value::Bool(false);
                for &index in recorded.get(&hold).into_iter().flatten() {
                    let hold = &mut self.holds[index];
                    hold.reported_by_end |= lost && hold.ended.is_none();
                    if lost && hold.told_at.is_none() {
                        hold.told_at = Some(at);
                    }
                    if ends {
                        hold.ended = Some(at);
                    }
                    hold.reported_lost |= lost;
                }
            } else {
                return Err(format!("neither a grant, an end nor a loss: {line:?}"));
            }
        }
        Ok(())
    }

    /// Ends the holds process `pid` never ended at `at` (nanoseconds since the Unix epoch):
    /// when it was killed.
    pub fn died(&mut self, pid: u64, at: u128) {
        let holds = self.holds.iter_mut();
        for hold in holds.filter(|hold| hold.pid == pid && hold.ended.is_none()) {
            hold.ended = Some(at);
        }
    }

    /// From now on a holder counts as told of its loss only when told by its hold's end: for a
    /// store that never loses a lease its holder counts on (the simulator's: its failovers
    /// forget no grant or renewal the replica did not acknowledge), where a holder always knows
    /// by then. (A real store may lose a lease on its own — a failover — and its holder learn
    /// only at its release.)
    pub fn told_by_end(&mut self) {
        self.told_by_end = true;
    }

    /// For every hold of every name, how long its holder believed it held the lock: what a
    /// store's own record of its leases must cover, where the store never loses one on its own.
    pub fn beliefs(&self) -> impl Iterator<Item = Belief> + '_ {
        self.holds.iter().map(|hold| Belief {
            pid: hold.pid,
            hold: hold.number,
            name: hold.name.clone(),
            fence: hold.fence,
            from: hold.granted,
            until: match (hold.told_at, hold.ended) {
                (Some(told), Some(ended)) => Some(told.min(ended)),
                (told, ended) => told.or(ended),
            },
        })
    }

    /// Notes that the run ended `at` (nanoseconds since the Unix epoch).
    pub fn ran_until(&mut self, at: u128) {
        self.ran_until = Some(at);
    }

    /// Checks every lock name's holds: each pair that overlapped in time, where one of them
    /// was exclusive. With `fenced_store` false the writes were not checked against fences,
    /// so no overlap counts as fenced.
    ///
    /// A hold still open (its process neither ended it nor was reported [`died`](Self::died))
    /// counts as held to the end of time.
    pub fn check(&self, fenced_store: bool) -> Verdict {
        let mut verdict = Verdict {
            holds: self.shapes.values().sum(),
            shapes: self.shapes.clone(),
            ..Verdict::default()
        };
        let holds: Vec<Hold> = (self.holds.iter())
            .map(|hold| Hold {
                reported_lost: match self.told_by_end {
                    true => hold.reported_by_end,
                    false => hold.reported_lost,
                },
                ..hold.clone()
            })
            .collect();
        let mut by_name: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
        for hold in &holds {
            by_name.entry(&hold.name).or_default().push(hold);
        }
        for (name, mut holds) in by_name {
            holds.sort_by_key(|hold| hold.granted);
            let grants = holds.iter().map(|hold| hold.granted);
            let ends = grants.clone().skip(1).chain(self.ran_until);
            for (granted, next) in grants.zip(ends) {
                let gap = Duration::from_nanos(next.saturating_sub(granted) as u64);
                if gap > verdict.longest_gap {
                    (verdict.longest_gap, verdict.longest_gap_from) = (gap, granted);
                }
            }
            let mut open: Vec<&Hold> = Vec::new();
            for later in holds {
                open.retain(|earlier| earlier.ended.is_none_or(|end| end > later.granted));
                for earlier in open.iter().filter(|it| it.exclusive || later.exclusive) {
                    verdict.count(name, earlier, later, fenced_store);
                }
                open.push(later);
                if let Some(permits) = later.permits {
                    let holders = open.iter().filter(|it| it.permits.is_some());
                    let holders: Vec<&Hold> = holders.copied().collect();
                    if holders.len() as u64 > permits {
                        verdict.count_excess(name, &holders, permits);
                    }
                }
            }
        }
        verdict
    }
}

impl Verdict {
    /// Counts a moment when `holders` held a semaphore of `permits` on `name` at once.
    fn count_excess(&mut self, name: &str, holders: &[&Hold], permits: u64) {
        self.permits_exceeded += 1;
        if holders.iter().any(|hold| hold.reported_lost) {
            self.unfenced_reported += 1;
            return;
        }
        self.unfenced_unreported += 1;
        if self.examples.len() < 5 {
            let who: Vec<String> = (holders.iter())
                .map(|hold| format!("hold {} of process {}", hold.number, hold.pid))
                .collect();
            self.examples.push(format!(
                "{name}: {} holders of {permits} permits at once, none told it was lost: {}",
                holders.len(),
                who.join(", ")
            ));
        }
    }

    /// Whether nothing was found that fencing or a reported loss does not explain.
    pub fn holds_up(&self) -> bool {
        self.unfenced_unreported == 0
    }

    /// Counts holds `a` and `b` of lock `name`, which overlapped (`a` recorded first). The
    /// stale one is the one with the smaller fence — not always the one recorded first: a
    /// holder paused between the store's answer (or its process's handoff) and its record was
    /// stale before it wrote it. Without two fences to tell (a reader or a permit holder has
    /// none), the stale one is the one told its lease was lost, if only one was.
    fn count(&mut self, name: &str, a: &Hold, b: &Hold, fenced_store: bool) {
        let (stale, newer, fenced) = match (a.fence, b.fence) {
            (Some(one), Some(other)) if one != other => {
                let (stale, newer) = if one < other { (a, b) } else { (b, a) };
                (stale, newer, fenced_store)
            }
            _ if b.reported_lost && !a.reported_lost && !mutant!("checker-blames-the-told") => {
                (b, a, false)
            }
            _ => (a, b, false),
        };
        if fenced {
            self.fenced_overlaps += 1;
        } else if stale.reported_lost {
            self.unfenced_reported += 1;
        } else {
            self.unfenced_unreported += 1;
            if self.examples.len() < 5 {
                self.examples.push(format!(
                    "{name}: hold {} of process {} (fence {:?}, granted at {} ns) never told it \
                     was lost while hold {} of process {} (fence {:?}) was granted at {} ns",
                    stale.number,
                    stale.pid,
                    stale.fence,
                    stale.granted,
                    newer.number,
                    newer.pid,
                    newer.fence,
                    newer.granted,
                ));
            }
        }
    }
}

/// A grant's names and their fences.
fn parse_names(event: &Value) -> Option<Vec<(String, Option<u64>)>> {
    let names = event["names"].as_array()?;
    let fences = event["fences"].as_array()?;
    names
        .iter()
        .zip(fences)
        .map(|(name, fence)| Some((name.as_str()?.to_owned(), fence.as_u64())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(pid: u64, hold: u64, at: u64, fence: u64) -> String {
        format!(
            r#"{{"grant":{hold},"pid":{pid},"task":1,"at":{at},"hold":"mutex","names":["lock:k"],"fences":[{fence}]}}"#
        )
    }

    fn grant_of(pid: u64, hold: u64, at: u64, kind: &str) -> String {
        let permits = match kind {
            "permit" => r#","permits":2"#,
            _ => "",
        };
        format!(
            r#"{{"grant":{hold},"pid":{pid},"task":1,"at":{at},"hold":"{kind}","names":["lock:k"],"fences":[null]{permits}}}"#
        )
    }

    fn end(pid: u64, hold: u64, at: u64, held: bool) -> String {
        format!(r#"{{"end":{hold},"pid":{pid},"at":{at},"held":{held}}}"#)
    }

    fn history_of(processes: &[&[String]]) -> History {
        let mut history = History::default();
        for lines in processes {
            history.add(&lines.join("\n")).unwrap();
        }
        history
    }

    fn verdict(processes: &[&[String]], fenced_store: bool) -> Verdict {
        history_of(processes).check(fenced_store)
    }

    #[test]
    fn holds_one_after_another_never_overlap() {
        let a = [grant(1, 1, 100, 256), end(1, 1, 200, true)];
        let b = [grant(2, 1, 201, 512), end(2, 1, 300, true)];
        let verdict = verdict(&[&a, &b], true);
        assert_eq!((verdict.holds, verdict.fenced_overlaps), (2, 0));
        assert!(verdict.holds_up() && verdict.unfenced_reported == 0);
        assert_eq!(verdict.longest_gap, Duration::from_nanos(101));
    }

    #[test]
    fn an_overlap_the_later_fence_refuses_is_fenced() {
        let a = [grant(1, 1, 100, 256), end(1, 1, 400, false)];
        let b = [grant(2, 1, 300, 512), end(2, 1, 500, true)];
        let verdict = verdict(&[&a, &b], true);
        assert_eq!(verdict.fenced_overlaps, 1);
        assert!(verdict.holds_up());
    }

    #[test]
    fn the_same_overlap_without_fence_checks_is_unfenced_but_reported() {
        let a = [grant(1, 1, 100, 256), end(1, 1, 400, false)];
        let b = [grant(2, 1, 300, 512), end(2, 1, 500, true)];
        let verdict = verdict(&[&a, &b], false);
        assert_eq!((verdict.fenced_overlaps, verdict.unfenced_reported), (0, 1));
        assert!(verdict.holds_up());
    }

    #[test]
    fn two_holders_with_one_fence_both_told_they_hold_it_fail_the_check() {
        let a = [grant(1, 1, 100, 512), end(1, 1, 400, true)];
        let b = [grant(2, 1, 300, 512), end(2, 1, 500, true)];
        let verdict = verdict(&[&a, &b], true);
        assert_eq!(verdict.unfenced_unreported, 1);
        assert!(!verdict.holds_up());
        assert!(
            verdict.examples[0].contains("never told"),
            "{:?}",
            verdict.examples
        );
    }

    #[test]
    fn a_stale_holder_recorded_after_the_newer_one_is_still_the_stale_one() {
        let a = [grant(1, 1, 100, 512), end(1, 1, 400, true)];
        let b = [grant(2, 1, 300, 256), end(2, 1, 500, false)];
        let verdict = verdict(&[&a, &b], true);
        assert_eq!(verdict.fenced_overlaps, 1);
        let verdict_unfenced = history_of(&[&a, &b]).check(false);
        assert_eq!(
            verdict_unfenced.unfenced_reported, 1,
            "b, the stale one, was told"
        );
    }

    #[test]
    fn a_writer_recorded_after_a_pause_beside_a_reader_is_the_stale_one_when_told() {
        let reader = [grant_of(1, 1, 100, "read"), end(1, 1, 400, true)];
        let stale_writer = [
            grant(2, 1, 200, 256),
            end(2, 1, 250, false),
            r#"{"lost":1,"pid":2,"at":260}"#.to_owned(),
        ];
        let told = verdict(&[&reader, &stale_writer], true);
        assert_eq!((told.unfenced_reported, told.unfenced_unreported), (1, 0));
        // The twin: the same writer never told, both believed they held it.
        let unaware_writer = [grant(2, 1, 200, 256), end(2, 1, 250, true)];
        let unaware = verdict(&[&reader, &unaware_writer], true);
        assert_eq!(unaware.unfenced_unreported, 1);
    }

    #[test]
    fn a_loss_the_store_reports_after_the_end_still_counts_as_reported() {
        let a = [
            grant(1, 1, 100, 512),
            end(1, 1, 400, true),
            r#"{"lost":1,"pid":1,"at":450}"#.to_owned(),
        ];
        let b = [grant(2, 1, 300, 512), end(2, 1, 500, true)];
        let verdict = verdict(&[&a, &b], true);
        assert_eq!(
            (verdict.unfenced_reported, verdict.unfenced_unreported),
            (1, 0)
        );
    }

    /// The twin of the above, for a store that never loses a lease on its own: told only
    /// after its end, the holder believed it held the lock all along.
    #[test]
    fn told_by_end_a_loss_reported_after_the_end_does_not_count() {
        let a = [
            grant(1, 1, 100, 512),
            end(1, 1, 400, true),
            r#"{"lost":1,"pid":1,"at":450}"#.to_owned(),
        ];
        let b = [grant(2, 1, 300, 768), end(2, 1, 500, true)];
        let mut history = history_of(&[&a, &b]);
        history.told_by_end();
        assert_eq!(history.check(false).unfenced_unreported, 1);
        let told_before = [
            grant(1, 1, 100, 512),
            r#"{"lost":1,"pid":1,"at":350}"#.to_owned(),
            end(1, 1, 400, true),
        ];
        let mut history = history_of(&[&told_before, &b]);
        history.told_by_end();
        assert!(history.check(false).holds_up());
    }

    #[test]
    fn a_killed_holders_hold_ends_when_it_died() {
        let mut history = History::default();
        history.add(&grant(1, 1, 100, 512)).unwrap();
        history.add(&grant(2, 1, 300, 512)).unwrap();
        assert_eq!(history.check(true).unfenced_unreported, 1, "open: held on");
        history.died(1, 250);
        assert!(history.check(true).holds_up(), "died before the next grant");
    }

    #[test]
    fn the_time_after_the_last_grant_counts_as_a_gap() {
        let mut history = History::default();
        history
            .add(&[grant(1, 1, 100, 256), end(1, 1, 110, true)].join("\n"))
            .unwrap();
        history.add(&grant(2, 1, 150, 512)).unwrap();
        assert_eq!(history.check(true).longest_gap, Duration::from_nanos(50));
        history.ran_until(1_000);
        assert_eq!(history.check(true).longest_gap, Duration::from_nanos(850));
    }

    #[test]
    fn readers_share_and_a_writer_among_them_is_an_overlap() {
        let a = [grant_of(1, 1, 100, "read"), end(1, 1, 400, true)];
        let b = [grant_of(2, 1, 200, "read"), end(2, 1, 500, true)];
        assert!(
            verdict(&[&a, &b], true).holds_up(),
            "readers overlap freely"
        );
        let c = [grant_of(3, 1, 300, "write"), end(3, 1, 350, true)];
        let verdict = verdict(&[&a, &b, &c], true);
        assert_eq!(
            verdict.unfenced_unreported, 2,
            "the writer overlapped both readers"
        );
        assert_eq!(verdict.shapes.get("read"), Some(&2));
    }

    #[test]
    fn a_semaphore_of_two_may_have_two_holders_but_not_three() {
        let a = [grant_of(1, 1, 100, "permit"), end(1, 1, 400, true)];
        let b = [grant_of(2, 1, 200, "permit"), end(2, 1, 500, true)];
        assert!(verdict(&[&a, &b], true).holds_up(), "two of two permits");
        let c = [grant_of(3, 1, 300, "permit"), end(3, 1, 350, true)];
        let verdict = verdict(&[&a, &b, &c], true);
        assert_eq!(
            (verdict.permits_exceeded, verdict.unfenced_unreported),
            (1, 1)
        );
        assert!(
            verdict.examples[0].contains("3 holders of 2 permits"),
            "{:?}",
            verdict.examples
        );
    }
}
