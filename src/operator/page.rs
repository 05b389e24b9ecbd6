//! One page of a listing, and where the next begins. Every listing an operator pages through
//! (attempts newest first, the stuck list oldest first, refunds, the audit trail, the dead
//! letters) answers a [`Page`]: the command line prints its items and the cursor to pass
//! next, the admin API sends the items as the JSON array of contract §6 and the cursor in
//! `X-Next-Cursor`, the console links the next page by it.

/// One page of a listing: its items, in the listing's order, and the cursor of the next.
#[derive(Debug, Clone)]
pub struct Page<T, C> {
    pub items: Vec<T>,
    /// Where the next page begins: pass it as the listing's `before` (`--before`) when it
    /// pages newest first, as `after` (`--after`) when it pages oldest first; `None` when
    /// this page is the last.
    pub next: Option<C>,
}

impl<T, C> Page<T, C> {
    /// The page of `rows`, read with `limit` ([`sql_limit`]): only a full page can have one
    /// after it, so a shorter page (or an unlimited one) is the last. The last row names
    /// the next page by `cursor`; each row becomes an item by `item`.
    pub(crate) fn of_rows<R>(
        rows: Vec<R>,
        limit: Option<i64>,
        cursor: impl FnOnce(&R) -> C,
        item: impl FnMut(R) -> T,
    ) -> Self {
        let next = match (limit, rows.last()) {
            (Some(limit), Some(last)) if rows.len() as i64 == limit => Some(cursor(last)),
            _ => None,
        };
        Self {
            items: rows.into_iter().map(item).collect(),
            next,
        }
    }
}

/// A listing's `limit` as SQL's `LIMIT` takes it: 0 means all (`None`), and past `i64::MAX`
/// a limit leaves nothing out.
pub(crate) fn sql_limit(limit: usize) -> Option<i64> {
    (limit > 0).then(|| i64::try_from(limit).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(rows: usize, limit: usize) -> Page<String, usize> {
        Page::of_rows(
            (1..=rows).collect(),
            sql_limit(limit),
            |last| *last,
            |row| row.to_string(),
        )
    }

    #[test]
    fn only_a_full_page_names_a_next_one() {
        assert_eq!(page(3, 3).next, Some(3));
        assert_eq!(page(3, 3).items, ["1", "2", "3"]);
        assert_eq!(page(2, 3).next, None, "a shorter page is the last");
        assert_eq!(page(0, 3).next, None);
        assert_eq!(
            page(3, 0).next,
            None,
            "an unlimited page is the whole listing"
        );
    }
}
