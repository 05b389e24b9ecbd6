//! The lease kernel's SQL (decision 230): the one place a statement that takes queued work
//! is built, for every kind of work that moves money (a charge's `payment_attempts`, a
//! refund's `refunds`, whatever comes next). A kind names its [`Queue`] and says which rows
//! are due, in what order, and what its claim sets; the kernel writes the statement around
//! that: the due rows locked `FOR UPDATE SKIP LOCKED` (two instances never take one row, and
//! neither waits for the other), and the claim's `UPDATE … FROM due` in the same statement,
//! with whatever the kind writes beside it (its transition). Every time in it is the
//! database's `now()`.
//!
//! The outbox relay's claim (`relay.rs`: it holds its queue rows' locks across the publish,
//! in a transaction, and deletes them), the webhook checks' (`webhooks.rs`: a lock on a
//! side table joined to its event) and the stream audit's watermark (`stream_audit.rs`: one
//! row, no queue) do not have this shape and keep their own statements.

/// A table of queued work and the alias its claim writes through.
#[derive(Debug, Clone, Copy)]
pub struct Queue {
    pub table: &'static str,
    /// Its primary key, one column.
    pub id: &'static str,
    /// The alias of the table in the claim's `UPDATE` (and in `RETURNING`).
    pub alias: &'static str,
}

/// Charges: `payment_attempts`, aliased `a`.
pub const ATTEMPTS: Queue = Queue {
    table: "payment_attempts",
    id: "payment_attempt_id",
    alias: "a",
};

/// Refunds: `refunds`, aliased `r`.
pub const REFUNDS: Queue = Queue {
    table: "refunds",
    id: "refund_id",
    alias: "r",
};

/// One due → claim statement: `WITH due AS (… FOR UPDATE SKIP LOCKED), claimed AS (UPDATE
/// … FROM due … RETURNING …)` and then the kind's `tail`, which reads `claimed` (and may
/// add its own CTEs first, starting with a comma).
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub queue: Queue,
    /// Columns the due rows carry beside the id, each starting with a comma (`due.x` in the
    /// claim); empty for none.
    pub due_columns: &'a str,
    /// Which rows are due: the `WHERE` of the due rows.
    pub due: &'a str,
    /// The `ORDER BY` of the due rows (oldest due first).
    pub order: &'a str,
    /// The `LIMIT` (a bind parameter).
    pub limit: &'a str,
    /// The claim's `SET` list, on the queue's alias: the fence moves on here.
    pub set: &'a str,
    /// The claim's `RETURNING` list.
    pub returning: &'a str,
}

impl Claim<'_> {
    /// The statement, ending with `tail`.
    pub fn sql(&self, tail: &str) -> String {
        let Queue { table, id, alias } = self.queue;
        format!(
            "WITH due AS (
                 SELECT {id}{due_columns} FROM {table}
                 WHERE {due}
                 ORDER BY {order}
                 LIMIT {limit}
                 FOR UPDATE SKIP LOCKED
             ),
             claimed AS (
                 UPDATE {table} {alias} SET {set}
                 FROM due
                 WHERE {alias}.{id} = due.{id}
                 RETURNING {returning}
             ){tail}",
            due_columns = self.due_columns,
            due = self.due,
            order = self.order,
            limit = self.limit,
            set = self.set,
            returning = self.returning,
        )
    }
}

/// The due rows of `queue` (aliased by its alias) locked one claim at a time inside the
/// caller's transaction, for work whose decision reads other tables first (a refund's
/// admission reads its charge): `SELECT columns FROM queue alias join WHERE due ORDER BY
/// order LIMIT limit FOR UPDATE OF alias SKIP LOCKED`.
pub fn lock_due(
    queue: Queue,
    columns: &str,
    join: &str,
    due: &str,
    order: &str,
    limit: &str,
) -> String {
    let Queue { table, alias, .. } = queue;
    format!(
        "SELECT {columns} FROM {table} {alias} {join}
         WHERE {due}
         ORDER BY {order}
         LIMIT {limit}
         FOR UPDATE OF {alias} SKIP LOCKED"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_locks_its_due_rows_skipping_the_held_ones_and_updates_them_in_one_statement() {
        let sql = Claim {
            queue: REFUNDS,
            due_columns: "",
            due: "status = 'pending'",
            order: "next_run_at",
            limit: "$1",
            set: "lease_token = r.lease_token + 1",
            returning: "r.refund_id",
        }
        .sql(" SELECT * FROM claimed");
        let due = sql.find("FOR UPDATE SKIP LOCKED").unwrap();
        let update = sql.find("UPDATE refunds r SET lease_token").unwrap();
        assert!(due < update, "{sql}");
        assert!(sql.contains("WHERE r.refund_id = due.refund_id"), "{sql}");
        assert!(sql.ends_with("SELECT * FROM claimed"), "{sql}");
    }
}
