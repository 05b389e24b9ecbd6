//! What people and dashboards read, and nothing that moves money: the attempts as an
//! operator finds and shows them (`attempts`: listings by order, customer or status, one
//! attempt's history, the counts), the console overview's charts (`charts`) and the
//! database-backed gauges of `/metrics` (`gauges`), and the one `cursor` every
//! listing of attempts and refunds pages by. Each statement reads; the one write an
//! operator makes, a resolution, lives with the attempts (`super::attempts::resolve`).

pub mod attempts;
pub mod charts;
pub mod cursor;
pub mod gauges;
