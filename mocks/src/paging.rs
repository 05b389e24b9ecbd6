//! Keyset paging, the one routine both dialects' lists page by: a page is a range of an
//! ordered index from the cursor on, so it costs `O(log n + limit)` wherever it falls in a
//! long listing (a scan of everything per page made a sweep of 200,000 charges quadratic).

use std::collections::BTreeSet;
use std::ops::Bound;

/// Which way a list runs through its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// Oldest first (contract §3.2).
    Ascending,
    /// Newest first (Stripe's lists).
    Descending,
}

/// One page of a list and whether more follow.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Page<T> {
    pub(crate) data: Vec<T>,
    pub(crate) has_more: bool,
}

/// The first `limit` keys of `index` within `[from, to)` that come after `cursor` in the
/// list's `order`, each turned into an item by `item`. A cursor outside the window leaves
/// the window whole on that side; a window that holds nothing answers an empty page
/// (`BTreeSet::range` would panic on a start past its end).
pub(crate) fn page<'a, K: Ord, T>(
    index: &'a BTreeSet<K>,
    from: K,
    to: K,
    cursor: Option<K>,
    order: Order,
    limit: usize,
    item: impl FnMut(&'a K) -> T,
) -> Page<T> {
    let (lower, upper) = match (order, cursor) {
        (Order::Ascending, Some(cursor)) if cursor >= from => (Bound::Excluded(cursor), to),
        (Order::Descending, Some(cursor)) if cursor < to => (Bound::Included(from), cursor),
        _ => (Bound::Included(from), to),
    };
    let empty = match &lower {
        Bound::Included(key) | Bound::Excluded(key) => *key >= upper,
        Bound::Unbounded => false,
    };
    let mut data: Vec<T> = if empty {
        Vec::new()
    } else {
        let range = index.range((lower, Bound::Excluded(upper)));
        match order {
            Order::Ascending => range.take(limit + 1).map(item).collect(),
            Order::Descending => range.rev().take(limit + 1).map(item).collect(),
        }
    };
    let has_more = data.len() > limit;
    data.truncate(limit);
    Page { data, has_more }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> BTreeSet<u32> {
        (0..10).collect()
    }

    #[test]
    fn a_page_runs_from_the_cursor_in_the_list_order_and_says_whether_more_follow() {
        let index = keys();
        let ascending = page(&index, 2, 8, Some(3), Order::Ascending, 2, |k| *k);
        assert_eq!(ascending.data, [4, 5]);
        assert!(ascending.has_more);
        let descending = page(&index, 2, 8, Some(3), Order::Descending, 2, |k| *k);
        assert_eq!(descending.data, [2]);
        assert!(!descending.has_more);
        let first = page(&index, 2, 8, None, Order::Descending, 6, |k| *k);
        assert_eq!(first.data, [7, 6, 5, 4, 3, 2]);
        assert!(!first.has_more);
    }

    #[test]
    fn an_empty_window_or_a_cursor_past_it_answers_an_empty_page() {
        let index = keys();
        for (from, to, cursor, order) in [
            (5, 5, None, Order::Ascending),
            (7, 2, None, Order::Descending),
            (2, 8, Some(9), Order::Ascending),
            (2, 8, Some(1), Order::Descending),
            (2, 8, Some(2), Order::Descending),
        ] {
            let page = page(&index, from, to, cursor, order, 10, |k| *k);
            assert_eq!(
                page,
                Page {
                    data: vec![],
                    has_more: false
                },
                "{from}..{to} {cursor:?}"
            );
        }
    }
}
