//! Relist bookkeeping in connection-scoped temporary tables (see `schema::TEMP_TABLES`).

use rusqlite::{Connection, params};

/// What is being relisted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RelistKind {
    /// Pods: IP ownership intervals.
    Pods,
    /// Endpoints: membership intervals.
    Memberships,
}

impl RelistKind {
    fn name(self) -> &'static str {
        match self {
            RelistKind::Pods => "pods",
            RelistKind::Memberships => "memberships",
        }
    }

    fn seen_table(self) -> &'static str {
        match self {
            RelistKind::Pods => "temp.pod_relist_seen",
            RelistKind::Memberships => "temp.membership_relist_seen",
        }
    }
}

/// Which relists are running, read once per transaction and kept in step with it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Relists {
    pods: bool,
    memberships: bool,
}

impl Relists {
    /// Reads the running relists of this connection.
    pub(crate) fn load(conn: &Connection) -> rusqlite::Result<Self> {
        let mut relists = Relists::default();
        let mut stmt = conn.prepare_cached("SELECT kind FROM temp.relists")?;
        for kind in stmt.query_map([], |r| r.get::<_, String>(0))? {
            match kind?.as_str() {
                "pods" => relists.pods = true,
                "memberships" => relists.memberships = true,
                _ => {}
            }
        }
        Ok(relists)
    }

    /// Whether a relist of `kind` is running.
    pub(crate) fn active(&self, kind: RelistKind) -> bool {
        match kind {
            RelistKind::Pods => self.pods,
            RelistKind::Memberships => self.memberships,
        }
    }

    fn set(&mut self, kind: RelistKind, on: bool) {
        match kind {
            RelistKind::Pods => self.pods = on,
            RelistKind::Memberships => self.memberships = on,
        }
    }
}

/// Starts (or restarts) a relist: nothing is marked seen yet.
pub(crate) fn begin(
    conn: &Connection,
    relists: &mut Relists,
    kind: RelistKind,
) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR IGNORE INTO temp.relists (kind) VALUES (?1)")?
        .execute([kind.name()])?;
    conn.execute(&format!("DELETE FROM {}", kind.seen_table()), [])?;
    relists.set(kind, true);
    Ok(())
}

/// Marks a row as seen by the running relist.
pub(crate) fn mark(conn: &Connection, kind: RelistKind, id: i64) -> rusqlite::Result<()> {
    let sql = match kind {
        RelistKind::Pods => "INSERT OR IGNORE INTO temp.pod_relist_seen (id) VALUES (?1)",
        RelistKind::Memberships => {
            "INSERT OR IGNORE INTO temp.membership_relist_seen (id) VALUES (?1)"
        }
    };
    conn.prepare_cached(sql)?.execute(params![id])?;
    Ok(())
}

/// Finishes a running relist of `kind`: `close`, an UPDATE given the end time in ns as
/// `?1`, ends the open rows it did not see; how many it ended. Without a running relist of
/// `kind`, nothing.
pub(crate) fn finish(
    conn: &Connection,
    relists: &mut Relists,
    kind: RelistKind,
    at_ns: i64,
    close: &str,
) -> rusqlite::Result<usize> {
    if !relists.active(kind) {
        return Ok(0);
    }
    let closed = conn.prepare_cached(close)?.execute([at_ns])?;
    end(conn, relists, kind)?;
    Ok(closed)
}

/// Ends a relist.
pub(crate) fn end(
    conn: &Connection,
    relists: &mut Relists,
    kind: RelistKind,
) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM temp.relists WHERE kind = ?1")?
        .execute([kind.name()])?;
    conn.execute(&format!("DELETE FROM {}", kind.seen_table()), [])?;
    relists.set(kind, false);
    Ok(())
}
