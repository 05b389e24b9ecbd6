//! Reading what a person typed into a console form: a blank field narrows nothing.

use time::OffsetDateTime;

/// The field's text, trimmed; `None` when it is blank.
pub(super) fn set(field: &str) -> Option<String> {
    let field = field.trim();
    (!field.is_empty()).then(|| field.to_owned())
}

/// A filled-in field parsed as a `T`: `Ok(None)` when it is blank, the parse error when it
/// is not a `T`.
pub(super) fn parse_set<T: std::str::FromStr>(field: &str) -> Result<Option<T>, T::Err> {
    set(field).map(|text| text.parse()).transpose()
}

/// A time typed in a form: RFC 3339, or `YYYY-MM-DD[THH:MM[:SS]]` read as UTC (what a
/// person types, and what a `datetime-local` field sends).
pub(super) fn console_time(what: &str, text: &str) -> Result<Option<OffsetDateTime>, String> {
    let Some(text) = set(text) else {
        return Ok(None);
    };
    let padded = match text.len() {
        10 => format!("{text}T00:00:00Z"),
        16 => format!("{text}:00Z"),
        19 => format!("{text}Z"),
        _ => text.clone(),
    };
    crate::operator::parse_time(&padded).map(Some).map_err(|_| {
        format!("{what}: `{text}` is not a time such as 2026-12-01T13:00:00Z or 2026-12-01")
    })
}

/// The fields a person set (trimmed; blank ones left out), as query parameters: what a
/// page's links carry so that the next page, or an export, finds the same.
pub(super) fn set_fields(fields: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    fields
        .iter()
        .filter_map(|&(name, value)| set(value).map(|value| (name, value)))
        .collect()
}

/// `path?<params>`: a link that carries `params` as the query.
pub(super) fn link(path: &str, params: &[(&'static str, String)]) -> String {
    format!(
        "{path}?{}",
        serde_urlencoded::to_string(params).unwrap_or_default()
    )
}

/// The link to the page after this one: `fields` as they were set, from `cursor` on.
pub(super) fn next_page(
    path: &str,
    fields: &[(&'static str, &str)],
    cursor: impl std::fmt::Display,
) -> String {
    let mut params = set_fields(fields);
    params.push(("before", cursor.to_string()));
    link(path, &params)
}
