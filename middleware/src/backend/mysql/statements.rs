//! The SQL of the MySQL/MariaDB backend, written once per table name.
//!
//! Everything about one lock name lives in its one row, so that every acquire is a single
//! `INSERT … ON DUPLICATE KEY UPDATE`, which InnoDB runs with the row locked. That statement
//! has no `WHERE`: each column is assigned `IF(taken, new, old)`. Assignments run left to
//! right and later ones read the new values, so the first one decides (on the old row) and
//! records the answer with `LAST_INSERT_ID(answer)`: the fence, or 1 for a shared hold, or 0
//! when busy; the later ones read it back as `LAST_INSERT_ID() > 0`, and the client reads it
//! from the statement's reply.

use crate::backend::BackendError;
use crate::backend::lock_shapes::WAITER_MARK_TTL;

/// The longest lock name the table's key column holds, in bytes.
pub(super) const MAX_NAME_LEN: usize = 512;

/// What a `?` of a statement stands for, in the order the statement takes them.
#[derive(Clone, Copy, Debug)]
pub(super) enum Param {
    /// The lock name.
    Name,
    /// The caller's owner token.
    Owner,
    /// The lease's TTL in microseconds.
    Ttl,
    /// How many permits the semaphore has.
    Permits,
    /// Whether a busy caller will ask again (a writer then leaves its intent, a reader its
    /// claim).
    Patient,
    /// The holder's label (`NULL` where unknown).
    Label,
    /// 0: a reader's permits, in its record.
    Zero,
}

/// One statement and what its `?`s stand for.
#[derive(Debug)]
pub(super) struct Statement {
    pub(super) sql: String,
    pub(super) params: &'static [Param],
}

/// The statements on one lease table.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) table: String,
    pub(super) create_table: String,
    pub(super) acquire: Statement,
    pub(super) acquire_read: Statement,
    pub(super) acquire_write: Statement,
    pub(super) acquire_permit: Statement,
    /// → µs until the lock may change: the soonest end of the exclusive lease, a shared hold,
    /// a waiting writer's intent or a waiting reader's claim.
    pub(super) holder_left: Statement,
    /// One row matched if the exclusive lease was still held.
    pub(super) extend: Statement,
    /// One row matched if the exclusive lease was still held.
    pub(super) release: Statement,
    /// One row matched if the shared hold was still held.
    pub(super) extend_shared: Statement,
    /// One row matched if the shared hold was still held.
    pub(super) release_shared: Statement,
    /// Drops whatever the owner holds or intends on the name.
    pub(super) abandon: Statement,
    /// `?` name: makes sure it has a row, to lock.
    pub(super) ensure_row: String,
    /// `?` name → its row, locked for update: now, the live exclusive holder and its µs left,
    /// µs until the first shared hold ends, fence, tickets, whether readers wait.
    pub(super) lock_row: String,
    /// Writes a queue operation's change. `?`: action (0 keeps the holder, 1 makes the owner
    /// the holder for the lease, 2 frees the lock), lease µs, action again, owner, action and
    /// the new holder's label (if it took the lock itself), action, action, owner again (its
    /// intent goes), fence, waited, tickets, name.
    pub(super) write_row: String,
    /// `?` name → its live exclusive holder, for an operator: (now ms, owner, label, since ms,
    /// expiry ms, fence, writer) — owner `NULL` when free — and (tickets, waiting writers and
    /// readers' claims).
    pub(super) inspect: String,
    /// `?` name → its live shared holders: (owner, label, since ms, expiry ms, permits; 0 a
    /// reader).
    pub(super) inspect_shared: String,
    /// `?` prefix, after, rows → up to rows names after `after` from the prefix on, in order,
    /// each with whether it is held now: one page of the operator's listing.
    pub(super) held_page: String,
}

/// Now, in microseconds since the epoch by the server's UTC clock: how shared holds expire.
const NOW_US: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))";

/// Nobody holds the lock exclusively (never taken, released, or the lease expired), by the
/// server's UTC clock whatever the session's time zone.
const EXCLUSIVE_FREE: &str = "(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6))";

/// The row's shared holds as a table of (token, expiry µs).
const HOLDERS: &str = "JSON_TABLE(shared, '$[*]' \
    COLUMNS (token CHAR(32) PATH '$.t', expiry BIGINT PATH '$.e')) AS holder";

/// The path of a shared holder's record in `holders`, the token `?`'s, or `holder.token`'s
/// with `record("holder.token")`.
fn record(token: &str) -> String {
    format!("CONCAT('$.\"', {token}, '\"')")
}

/// Now in milliseconds since the epoch, by the server's UTC clock.
const NOW_MS: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000";

/// The row's readers' claims as a table of (token, expiry µs).
const CLAIMS: &str = "JSON_TABLE(COALESCE(claims, JSON_ARRAY()), '$[*]' \
    COLUMNS (token CHAR(32) PATH '$.t', expiry BIGINT PATH '$.e')) AS claim";

/// The row's waiting writers' intents, each a writer's place in line, as a table of (token,
/// arrival µs, expiry µs, whether it bars readers).
const WRITERS: &str = "JSON_TABLE(COALESCE(writers, JSON_ARRAY()), '$[*]' \
    COLUMNS (token CHAR(32) PATH '$.t', arrival BIGINT PATH '$.a', expiry BIGINT PATH '$.e', \
        bars INT PATH '$.b')) AS writer";

/// Whether the statement's first assignment took the lock.
const TAKEN: &str = "LAST_INSERT_ID() > 0";

/// Longer than any lease, in µs: `LEAST` of nothing live.
const FOREVER: i64 = i64::MAX;

impl Statements {
    /// The statements on `table`: one or two plain identifiers (`name` or `database.name`).
    pub(super) fn for_table(table: &str) -> Result<Self, BackendError> {
        use Param::{Label, Name, Owner, Patient, Permits, Ttl, Zero};
        super::super::sql::check_table_name(table)?;
        let live_count = format!("(SELECT COUNT(*) FROM {HOLDERS} WHERE expiry > {NOW_US})");
        let live_shared = format!(
            "(SELECT COALESCE(JSON_ARRAYAGG(JSON_OBJECT('t', token, 'e', expiry)), JSON_ARRAY()) \
             FROM {HOLDERS} WHERE expiry > {NOW_US})"
        );
        let own_record = record("?");
        let held_shared =
            format!("EXISTS (SELECT 1 FROM {HOLDERS} WHERE token = ? AND expiry > {NOW_US})");
        let free = format!("{EXCLUSIVE_FREE} AND {live_count} = 0");
        let no_claims = format!("NOT EXISTS (SELECT 1 FROM {CLAIMS} WHERE expiry > {NOW_US})");
        // The live claims but the owner's (`?`).
        let claims_but = format!(
            "(SELECT COALESCE(JSON_ARRAYAGG(JSON_OBJECT('t', token, 'e', expiry)), JSON_ARRAY()) \
             FROM {CLAIMS} WHERE expiry > {NOW_US} AND token <> ?)"
        );
        let claim_us = WAITER_MARK_TTL.as_micros();
        // When the owner (`?`) came to the line of waiting writers, if its intent stands.
        let own_arrival =
            format!("(SELECT arrival FROM {WRITERS} WHERE token = ? AND expiry > {NOW_US})");
        // Whether writers whose intents stand came before the owner (`?` ×3): all of them, if
        // it has no place.
        let writers_ahead = format!(
            "EXISTS (SELECT 1 FROM {WRITERS} WHERE expiry > {NOW_US} AND token <> ? \
                AND (arrival, token) < (COALESCE({own_arrival}, {FOREVER}), ?))"
        );
        let no_bar =
            format!("NOT EXISTS (SELECT 1 FROM {WRITERS} WHERE expiry > {NOW_US} AND bars)");
        // The owner's (`?`) intent stands and bars readers: readers' claims do not hold it
        // back.
        let own_bar = format!(
            "EXISTS (SELECT 1 FROM {WRITERS} WHERE token = ? AND expiry > {NOW_US} AND bars)"
        );
        // The standing intents but the owner's (`?`, which may be `NULL`).
        let writers_but = format!(
            "(SELECT COALESCE(JSON_ARRAYAGG(JSON_OBJECT(\
                't', token, 'a', arrival, 'e', expiry, 'b', bars)), JSON_ARRAY()) \
             FROM {WRITERS} WHERE expiry > {NOW_US} AND NOT token <=> ?)"
        );
        let exclusive =
            |condition: &str, writer: bool, also: &str, params: &'static [Param]| Statement {
                sql: format!(
                    "INSERT INTO {table} \
                        (name, owner, expires_at, holder, since, is_writer, fence, shared) \
                     VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6), \
                        {writer}, LAST_INSERT_ID(1), JSON_ARRAY()) \
                     ON DUPLICATE KEY UPDATE \
                        fence = IF({condition}, LAST_INSERT_ID(fence + 1), \
                            fence + 0 * LAST_INSERT_ID(0)), \
                        owner = IF({TAKEN}, VALUES(owner), owner), \
                        expires_at = IF({TAKEN}, VALUES(expires_at), expires_at), \
                        holder = IF({TAKEN}, VALUES(holder), holder), \
                        since = IF({TAKEN}, VALUES(since), since), \
                        is_writer = IF({TAKEN}, VALUES(is_writer), is_writer), \
                        shared = IF({TAKEN}, JSON_ARRAY(), shared), \
                        holders = IF({TAKEN}, NULL, holders){also}"
                ),
                params,
            };
        let shared = |condition: &str, also: &str, params: &'static [Param]| Statement {
            sql: format!(
                "INSERT INTO {table} (name, fence, shared, holders) \
                 VALUES (?, 0 * LAST_INSERT_ID(1), \
                    JSON_ARRAY(JSON_OBJECT('t', ?, 'e', {NOW_US} + ?)), \
                    JSON_OBJECT(?, JSON_ARRAY(?, {NOW_US}, ?))) \
                 ON DUPLICATE KEY UPDATE \
                    fence = fence + 0 * LAST_INSERT_ID(IF({condition}, 1, 0)), \
                    shared = IF({TAKEN}, JSON_MERGE_PRESERVE({live_shared}, VALUES(shared)), \
                        shared), \
                    holders = IF({TAKEN}, \
                        JSON_MERGE_PATCH(COALESCE(holders, JSON_OBJECT()), VALUES(holders)), \
                        holders){also}"
            ),
            params,
        };
        let left = |expiry: &str| {
            format!(
                "COALESCE(IF({expiry} > UTC_TIMESTAMP(6), \
                    TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), {expiry}), NULL), {FOREVER})"
            )
        };
        Ok(Self {
            table: table.to_owned(),
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {table} (\
                    name VARBINARY({MAX_NAME_LEN}) NOT NULL PRIMARY KEY, \
                    owner CHAR(32) NULL, \
                    expires_at DATETIME(6) NULL, \
                    fence BIGINT UNSIGNED NOT NULL, \
                    holder VARCHAR(512) NULL, \
                    since DATETIME(6) NULL, \
                    is_writer BOOLEAN NOT NULL DEFAULT FALSE, \
                    shared JSON NOT NULL, \
                    holders JSON NULL, \
                    claims JSON NULL, \
                    writers JSON NULL, \
                    waited BOOLEAN NOT NULL DEFAULT FALSE, \
                    tickets MEDIUMTEXT NULL) ENGINE = InnoDB"
            ),
            acquire: exclusive(&free, false, "", &[Name, Owner, Ttl, Label]),
            // A busy writer that will ask again keeps its place in line (when it came); the
            // first of the line bars readers once readers alone held it back (every claim came
            // in), and while it is first: a bar behind another writer (whose arrival, read
            // before it waited for the row, came first) would hold back the readers whose
            // claims that writer waits for. Taken, its intent goes.
            acquire_write: exclusive(
                &format!("{free} AND NOT {writers_ahead} AND ({no_claims} OR {own_bar})"),
                true,
                &format!(
                    ", writers = IF({TAKEN}, {writers_but}, IF(?, \
                        JSON_ARRAY_APPEND({writers_but}, '$', JSON_OBJECT('t', ?, \
                            'a', COALESCE({own_arrival}, {NOW_US}), 'e', {NOW_US} + {claim_us}, \
                            'b', ({own_bar} OR ({live_count} > 0 AND {no_claims})) \
                                AND NOT {writers_ahead})), \
                        writers))"
                ),
                &[
                    Name, Owner, Ttl, Label, // the row
                    Owner, Owner, Owner, Owner, // taken: nobody ahead, or its bar
                    Owner, Patient, Owner, Owner, Owner, Owner, Owner, Owner,
                    Owner, // its place
                ],
            ),
            // A reader that waits claims the next turn; once in, its claim goes.
            acquire_read: shared(
                &format!("{EXCLUSIVE_FREE} AND {no_bar}"),
                &format!(
                    ", claims = IF({TAKEN}, {claims_but}, IF(?, JSON_ARRAY_APPEND({claims_but}, \
                        '$', JSON_OBJECT('t', ?, 'e', {NOW_US} + {claim_us})), claims))"
                ),
                &[
                    Name, Owner, Ttl, Owner, Label, Zero, Owner, Patient, Owner, Owner,
                ],
            ),
            acquire_permit: shared(
                &format!("{EXCLUSIVE_FREE} AND {live_count} < ?"),
                "",
                &[Name, Owner, Ttl, Owner, Label, Permits, Permits],
            ),
            holder_left: Statement {
                sql: format!(
                    "SELECT NULLIF(LEAST({}, \
                        COALESCE((SELECT MIN(expiry) FROM {WRITERS} WHERE expiry > {NOW_US}) \
                            - {NOW_US}, {FOREVER}), \
                        COALESCE((SELECT MIN(expiry) FROM {HOLDERS} WHERE expiry > {NOW_US}) \
                            - {NOW_US}, {FOREVER}), \
                        COALESCE((SELECT MIN(expiry) FROM {CLAIMS} WHERE expiry > {NOW_US}) \
                            - {NOW_US}, {FOREVER})), {FOREVER}) \
                     FROM {table} WHERE name = ?",
                    left("expires_at"),
                ),
                params: &[Name],
            },
            extend: Statement {
                sql: format!(
                    "UPDATE {table} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
                        holder = COALESCE(holder, ?) \
                     WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)"
                ),
                // A lock a release handed on through the queue gets its holder's label here.
                params: &[Ttl, Label, Name, Owner],
            },
            // A waited-for lock is released through the queue (`sql::tickets`) instead.
            release: Statement {
                sql: format!(
                    "UPDATE {table} SET owner = NULL, expires_at = NULL \
                     WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6) \
                        AND NOT waited"
                ),
                params: &[Name, Owner],
            },
            extend_shared: Statement {
                sql: format!(
                    "UPDATE {table} SET shared = (\
                        SELECT JSON_ARRAYAGG(JSON_OBJECT(\
                            't', token, 'e', IF(token = ?, {NOW_US} + ?, expiry))) \
                        FROM {HOLDERS} WHERE expiry > {NOW_US}) \
                     WHERE name = ? AND {held_shared}"
                ),
                params: &[Owner, Ttl, Name, Owner],
            },
            release_shared: Statement {
                sql: format!(
                    "UPDATE {table} SET shared = (\
                        SELECT COALESCE(JSON_ARRAYAGG(JSON_OBJECT('t', token, 'e', expiry)), \
                            JSON_ARRAY()) \
                        FROM {HOLDERS} WHERE expiry > {NOW_US} AND token <> ?), \
                        holders = JSON_REMOVE(holders, {own_record}) \
                     WHERE name = ? AND {held_shared}"
                ),
                params: &[Owner, Owner, Name, Owner],
            },
            // `expires_at` is assigned before `owner`: it still reads whether the old owner was
            // the caller.
            abandon: Statement {
                sql: format!(
                    "UPDATE {table} SET \
                        expires_at = IF(owner <=> ?, NULL, expires_at), \
                        owner = IF(owner <=> ?, NULL, owner), \
                        shared = (\
                            SELECT COALESCE(JSON_ARRAYAGG(JSON_OBJECT('t', token, 'e', expiry)), \
                                JSON_ARRAY()) \
                            FROM {HOLDERS} WHERE token <> ?), \
                        holders = JSON_REMOVE(holders, {own_record}), \
                        claims = {claims_but}, \
                        writers = {writers_but} \
                     WHERE name = ?"
                ),
                params: &[Owner, Owner, Owner, Owner, Owner, Owner, Name],
            },
            ensure_row: format!(
                "INSERT INTO {table} (name, fence, shared) VALUES (?, 0, JSON_ARRAY()) \
                 ON DUPLICATE KEY UPDATE name = name"
            ),
            lock_row: format!(
                "SELECT {NOW_US}, \
                    IF(expires_at > UTC_TIMESTAMP(6), owner, NULL), \
                    IF(expires_at > UTC_TIMESTAMP(6), \
                        TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), NULL), \
                    (SELECT MIN(expiry) - {NOW_US} FROM {HOLDERS} WHERE expiry > {NOW_US}), \
                    CAST(fence AS SIGNED), COALESCE(tickets, ''), NOT {no_claims} \
                 FROM {table} WHERE name = ? FOR UPDATE"
            ),
            write_row: format!(
                "UPDATE {table} SET \
                    expires_at = CASE ? WHEN 0 THEN expires_at \
                        WHEN 1 THEN UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND END, \
                    owner = CASE ? WHEN 0 THEN owner WHEN 1 THEN ? END, \
                    holder = CASE ? WHEN 1 THEN ? ELSE holder END, \
                    since = CASE ? WHEN 1 THEN UTC_TIMESTAMP(6) ELSE since END, \
                    is_writer = CASE ? WHEN 1 THEN FALSE ELSE is_writer END, \
                    writers = {writers_but}, \
                    fence = ?, waited = ?, tickets = ? \
                 WHERE name = ?"
            ),
            inspect: format!(
                "SELECT {NOW_MS}, IF({EXCLUSIVE_FREE}, NULL, owner), holder, \
                    TIMESTAMPDIFF(MICROSECOND, '1970-01-01', since) DIV 1000, \
                    TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) DIV 1000, \
                    CAST(fence AS SIGNED), is_writer, COALESCE(tickets, ''), \
                    (SELECT COUNT(*) FROM {WRITERS} WHERE expiry > {NOW_US}) \
                    + (SELECT COUNT(*) FROM {CLAIMS} WHERE expiry > {NOW_US}) \
                 FROM {table} WHERE name = ?"
            ),
            inspect_shared: {
                let field = |index: u8| {
                    let path = record("holder.token");
                    format!("JSON_EXTRACT(holders, CONCAT({path}, '[{index}]'))")
                };
                format!(
                    "SELECT holder.token, CAST(JSON_UNQUOTE({}) AS CHAR), CAST({} AS SIGNED) DIV 1000, \
                        holder.expiry DIV 1000, CAST(COALESCE({}, 0) AS SIGNED) \
                     FROM {table}, {HOLDERS} WHERE name = ? AND holder.expiry > {NOW_US}",
                    field(0),
                    field(1),
                    field(2)
                )
            },
            held_page: format!(
                "SELECT name, NOT ({free}) FROM {table} \
                 WHERE name >= ? AND name > ? ORDER BY name LIMIT ?"
            ),
        })
    }
}
