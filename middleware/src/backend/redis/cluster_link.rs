//! The connection the backend sends its commands on in a Redis Cluster: each command straight
//! to the master of its key's hash slot, on that master's own multiplexed connection.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{
    Cmd, ConnectionInfo, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, Value,
};

use super::cluster_topology::{Node, Topology};
use super::command_slot;

/// How many redirections and waits one command may go through before its last answer is
/// the caller's.
const MOST_TRIES: u32 = 8;
/// The first wait after a `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN` or `LOADING`; each next one
/// is twice as long, up to [`LONGEST_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(10);
const LONGEST_WAIT: Duration = Duration::from_millis(200);

/// A connection to a Redis Cluster that sends each command to the master serving its first
/// key's hash slot, on one multiplexed connection per master (redis-rs's
/// [`ConnectionManager`](redis::aio::ConnectionManager), as for one node): a lock's commands
/// cost the client what they cost on one node, and the masters' traffic does not queue through
/// one task.
///
/// It learns which master serves which slot from `CLUSTER SLOTS`, and again when a master
/// answers `MOVED`, a connection is refused or dropped, or a master answers nothing for a
/// second while commands wait (frozen, or failed over with its connection still open). It
/// follows `ASK` with `ASKING` during a slot's migration, and waits and sends again after
/// `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN` and `LOADING`, at most eight times in all. A command
/// whose connection broke after it was sent is not sent again (it may have run): its error is
/// the caller's.
///
/// Commands without a key (`WAIT`, `SCRIPT LOAD`, `PING`, …) go to every master, and their
/// answer is the smallest of the masters' numbers, or the first master's answer. A pipeline
/// goes whole to the master of its first key's slot, and a transaction (`MULTI`/`EXEC`) is not
/// sent again after a redirection: for commands spanning slots, use redis-rs's own
/// [`ClusterConnection`](redis::cluster_async::ClusterConnection).
///
/// Made by [`RedisBackend::connect_cluster`](super::RedisBackend::connect_cluster).
#[derive(Clone)]
pub struct ClusterLink {
    topology: Arc<Topology>,
}

impl ClusterLink {
    /// The masters serving slots now, by address in order, each with its own connection.
    pub(super) fn masters(&self) -> Vec<(String, ConnectionManager)> {
        let masters = self.topology.masters().into_iter();
        let mut masters: Vec<_> = masters
            .map(|node| (node.address().to_owned(), node.connection()))
            .collect();
        masters.sort_by(|(a, _), (b, _)| a.cmp(b));
        masters.dedup_by(|(a, _), (b, _)| a == b);
        masters
    }
}

impl std::fmt::Debug for ClusterLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masters = self.topology.masters();
        let masters: Vec<&str> = masters.iter().map(Node::address).collect();
        f.debug_struct("ClusterLink")
            .field("masters", &masters)
            .finish()
    }
}

/// What a redirection or failure asks of the link.
#[derive(Debug, PartialEq)]
enum Redirect {
    /// `MOVED`: the slot is served by `to` from now on.
    Moved { slot: u16, to: String },
    /// `ASK`: this once, ask `to`, after `ASKING`.
    Ask { to: String },
    /// The cluster or the master cannot answer yet: wait, then send again.
    Wait,
    /// The connection was refused: nothing was sent.
    Refused,
    /// The connection broke: the command may have run.
    Dropped,
}

/// What the link does next with a command.
enum Next {
    /// The answer is the caller's.
    Answer,
    /// Send to the slot's master again.
    Again,
    /// Send to this node, which serves the slot now (`MOVED`): whatever a refresh running
    /// meanwhile heard from a node that has not learned the move yet.
    Moved(Node),
    /// Send to this node after `ASKING`.
    Ask(Node),
}

impl ClusterLink {
    /// A link to the cluster `nodes` belong to (any of its nodes: the others are found
    /// through them).
    pub(super) async fn connect(nodes: Vec<ConnectionInfo>) -> RedisResult<Self> {
        Ok(Self {
            topology: Topology::discover(nodes).await?,
        })
    }

    async fn command(&self, command: &Cmd) -> RedisResult<Value> {
        let Some(slot) = command_slot::of_command(command) else {
            return self.everywhere(command).await;
        };
        let mut tries = 0;
        let mut sent_on = None;
        loop {
            let (node, asking) = match sent_on.take() {
                Some(to) => to,
                None => match self.master_of(slot, &mut tries).await? {
                    Some(node) => (node, false),
                    None => continue,
                },
            };
            let answer = node
                .send(async |connection| match asking {
                    true => asking_first(connection, command).await,
                    false => connection.req_packed_command(command).await,
                })
                .await;
            let redirect = match &answer {
                Ok(value) => redirect_of_value(value),
                Err(error) => redirect_of_error(error),
            };
            match self.follow(redirect, &mut tries).await {
                Next::Answer => return answer,
                Next::Again => {}
                Next::Moved(to) => sent_on = Some((to, false)),
                Next::Ask(to) => sent_on = Some((to, true)),
            }
        }
    }

    async fn pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let slot = command_slot::of_pipeline(pipeline).unwrap_or(0);
        let mut tries = 0;
        let mut moved_to = None;
        loop {
            let node = match moved_to.take() {
                Some(node) => node,
                None => match self.master_of(slot, &mut tries).await? {
                    Some(node) => node,
                    None => continue,
                },
            };
            let answer = node
                .send(async |connection| {
                    connection
                        .req_packed_commands(pipeline, offset, count)
                        .await
                })
                .await;
            let redirect = match &answer {
                Ok(values) if offset == 0 => match self.asked_again(pipeline, values).await {
                    Some(answered) => return answered,
                    None => redirect_of_values(values),
                },
                Ok(values) => redirect_of_values(values),
                Err(error) => redirect_of_error(error),
            };
            match self.follow(redirect, &mut tries).await {
                Next::Answer => return answer,
                Next::Moved(to) => moved_to = Some(to),
                Next::Again | Next::Ask(_) => {}
            }
        }
    }

    /// The master serving `slot`; `None` after a wait for the slots to be learned again when
    /// no master serves it, and an error once that was tried too often.
    async fn master_of(&self, slot: u16, tries: &mut u32) -> RedisResult<Option<Node>> {
        if let Some(node) = self.topology.master_of(slot) {
            return Ok(Some(node));
        }
        *tries += 1;
        if *tries >= MOST_TRIES {
            return Err(RedisError::from((
                ErrorKind::Server(ServerErrorKind::ClusterDown),
                "no master serves hash slot",
                slot.to_string(),
            )));
        }
        let _ = self.topology.refresh().await;
        tokio::time::sleep(wait_before(*tries)).await;
        Ok(None)
    }

    /// Acts on `redirect`: learns a moved slot, waits, or asks for the slots again; says
    /// whether to send again, and where.
    async fn follow(&self, redirect: Option<Redirect>, tries: &mut u32) -> Next {
        let Some(redirect) = redirect else {
            return Next::Answer;
        };
        *tries += 1;
        if *tries >= MOST_TRIES {
            return Next::Answer;
        }
        match redirect {
            Redirect::Moved { slot, to } => match self.topology.moved(slot, &to) {
                Ok(node) => {
                    // Moved again: the move is under way (the new master, still importing,
                    // sends back to the old one until it is told the slot is its own).
                    if *tries > 1 {
                        tokio::time::sleep(wait_before(*tries - 1)).await;
                    }
                    Next::Moved(node)
                }
                Err(_) => Next::Answer,
            },
            Redirect::Ask { to } => match self.topology.node(&to) {
                Ok(node) => Next::Ask(node),
                Err(_) => Next::Answer,
            },
            Redirect::Wait => {
                tokio::time::sleep(wait_before(*tries)).await;
                Next::Again
            }
            Redirect::Refused => match self.topology.refresh().await {
                Ok(()) => {
                    tokio::time::sleep(wait_before(*tries)).await;
                    Next::Again
                }
                Err(_) => Next::Answer,
            },
            Redirect::Dropped => {
                self.topology.refresh_soon();
                Next::Answer
            }
        }
    }

    /// The pipeline's answers with those its master sent on with `ASK` asked of the node they
    /// were sent to (after `ASKING` each): each command runs where its key is, once. `None`
    /// when no answer was an `ASK`.
    async fn asked_again(
        &self,
        pipeline: &Pipeline,
        values: &[Value],
    ) -> Option<RedisResult<Vec<Value>>> {
        let to = values
            .iter()
            .find_map(|value| match redirect_of_value(value) {
                Some(Redirect::Ask { to }) => Some(to),
                _ => None,
            })?;
        let asked: Vec<usize> = (values.iter().enumerate())
            .filter(|(_, value)| redirect_of_value(value) == Some(Redirect::Ask { to: to.clone() }))
            .map(|(index, _)| index)
            .collect();
        let mut again = Pipeline::with_capacity(2 * asked.len());
        for command in pipeline
            .cmd_iter()
            .enumerate()
            .filter(|(i, _)| asked.contains(i))
        {
            again.cmd("ASKING").add_command(command.1.clone());
        }
        let node = match self.topology.node(&to) {
            Ok(node) => node,
            Err(error) => return Some(Err(error)),
        };
        let answers = node
            .send(async |connection| {
                connection
                    .req_packed_commands(&again, 0, 2 * asked.len())
                    .await
            })
            .await;
        Some(answers.map(|answers| {
            let mut values = values.to_vec();
            for (index, answer) in asked
                .into_iter()
                .zip(answers.into_iter().skip(1).step_by(2))
            {
                values[index] = answer;
            }
            values
        }))
    }

    /// Sends a command without a key to every master: the smallest of their numbers, or the
    /// first master's answer; the first error if any failed.
    async fn everywhere(&self, command: &Cmd) -> RedisResult<Value> {
        let mut masters = self.topology.masters();
        if masters.is_empty() {
            self.topology.refresh().await?;
            masters = self.topology.masters();
        }
        let answers = join_all(masters.iter().map(|master| {
            master.send(async |connection| connection.req_packed_command(command).await)
        }))
        .await;
        let answers = answers.into_iter().collect::<RedisResult<Vec<Value>>>()?;
        if let Some(failed) = answers
            .iter()
            .find(|value| matches!(value, Value::ServerError(_)))
        {
            return Ok(failed.clone());
        }
        let numbers: Option<Vec<i64>> = (answers.iter())
            .map(|value| match value {
                Value::Int(number) => Some(*number),
                _ => None,
            })
            .collect();
        match numbers.and_then(|numbers| numbers.into_iter().min()) {
            Some(smallest) => Ok(Value::Int(smallest)),
            None => answers.into_iter().next().ok_or_else(|| {
                RedisError::from((ErrorKind::Server(ServerErrorKind::ClusterDown), "no master"))
            }),
        }
    }
}

impl ConnectionLike for ClusterLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.command(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.pipeline(pipeline, offset, count))
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// `ASKING`, then `command`, in one write: `ASKING` holds for the next command only.
async fn asking_first(
    connection: &mut redis::aio::ConnectionManager,
    command: &Cmd,
) -> RedisResult<Value> {
    let mut asking = Pipeline::with_capacity(2);
    asking.cmd("ASKING").add_command(command.clone());
    let mut answers = connection.req_packed_commands(&asking, 1, 1).await?;
    answers
        .pop()
        .ok_or_else(|| RedisError::from((ErrorKind::Parse, "no answer after ASKING")))
}

/// How long to wait before try `tries`.
fn wait_before(tries: u32) -> Duration {
    FIRST_WAIT
        .saturating_mul(1 << tries.saturating_sub(1).min(8))
        .min(LONGEST_WAIT)
}

fn redirect_of_value(value: &Value) -> Option<Redirect> {
    let Value::ServerError(error) = value else {
        return None;
    };
    redirect_of_server(error.kind()?, error.details())
}

/// The redirection of a pipeline's answers when all of them are the same one: none of its
/// commands ran, so the whole pipeline may be sent again.
fn redirect_of_values(values: &[Value]) -> Option<Redirect> {
    let first = redirect_of_value(values.first()?)?;
    let same = values
        .iter()
        .skip(1)
        .all(|value| redirect_of_value(value).as_ref() == Some(&first));
    same.then_some(first)
}

fn redirect_of_error(error: &RedisError) -> Option<Redirect> {
    match error.kind() {
        ErrorKind::Server(kind) => redirect_of_server(kind, error.detail()),
        _ if error.is_connection_refusal() => Some(Redirect::Refused),
        _ if error.is_io_error() || error.is_connection_dropped() => Some(Redirect::Dropped),
        _ => None,
    }
}

/// A server error's redirection: `MOVED <slot> <host:port>`, `ASK <slot> <host:port>`, or one
/// to wait out.
fn redirect_of_server(kind: ServerErrorKind, details: Option<&str>) -> Option<Redirect> {
    let target = || {
        let mut words = details?.split_ascii_whitespace();
        let slot = words.next()?.parse().ok()?;
        Some((slot, words.next()?.to_owned()))
    };
    match kind {
        ServerErrorKind::Moved => target().map(|(slot, to)| Redirect::Moved { slot, to }),
        ServerErrorKind::Ask => target().map(|(_, to)| Redirect::Ask { to }),
        ServerErrorKind::TryAgain
        | ServerErrorKind::ClusterDown
        | ServerErrorKind::MasterDown
        | ServerErrorKind::BusyLoading => Some(Redirect::Wait),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_and_ask_name_where_to_go() {
        assert_eq!(
            redirect_of_server(ServerErrorKind::Moved, Some("3999 127.0.0.1:6381")),
            Some(Redirect::Moved {
                slot: 3999,
                to: "127.0.0.1:6381".to_owned()
            })
        );
        assert_eq!(
            redirect_of_server(ServerErrorKind::Ask, Some("3999 127.0.0.1:6382")),
            Some(Redirect::Ask {
                to: "127.0.0.1:6382".to_owned()
            })
        );
        assert_eq!(
            redirect_of_server(ServerErrorKind::Moved, Some("garbled")),
            None
        );
        assert_eq!(
            redirect_of_server(ServerErrorKind::TryAgain, None),
            Some(Redirect::Wait)
        );
        assert_eq!(redirect_of_server(ServerErrorKind::NoScript, None), None);
    }

    #[test]
    fn waits_double_up_to_the_longest() {
        let waits: Vec<u128> = (1..=7)
            .map(|tries| wait_before(tries).as_millis())
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 200, 200]);
    }
}
