//! Statements prepared once per connection and reused.
//!
//! diesel never caches `sql_query` (its SQL could be anything), so every call was parsed and planned again and
//! cost an extra round trip. [`Prepared`] is a fixed SQL text whose `$n` placeholders are bound from a list of
//! values: diesel's statement cache keys it by its SQL text and bind types, so each connection prepares it once.
//! The queue's hot statements (claim, heartbeat, outcomes, enqueue) go through it. Behind a pooler in
//! transaction mode the cache is off ([`crate::pooler`]): each is then prepared and closed within its
//! transaction, as a `sql_query` is.
//!
//! The SQL must not contain `$` other than placeholders (no dollar quoting, no `$` in literals).

use chrono::{DateTime, Utc};
use diesel::QueryResult;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Array, Bool, Double, Integer, Jsonb, Nullable, Text, Timestamptz, Untyped, Uuid};

/// One bound value.
#[derive(Debug, Clone)]
pub enum Bind<'a> {
    /// A `text`.
    Text(&'a str),
    /// A `uuid`.
    Uuid(uuid::Uuid),
    /// An `integer`.
    Integer(i32),
    /// A `double precision`.
    Double(f64),
    /// A `boolean`.
    Bool(bool),
    /// A `text[]`.
    TextArray(Vec<String>),
    /// A `uuid[]`.
    UuidArray(Vec<uuid::Uuid>),
    /// An `integer[]`.
    IntegerArray(Vec<i32>),
    /// A `jsonb[]` with nulls.
    NullableJsonbArray(Vec<Option<&'a serde_json::Value>>),
    /// A `uuid` or null.
    NullableUuid(Option<uuid::Uuid>),
    /// A `text` or null.
    NullableText(Option<&'a str>),
    /// A `jsonb` or null.
    NullableJsonb(Option<&'a serde_json::Value>),
    /// A `jsonb`.
    Jsonb(&'a serde_json::Value),
    /// A `timestamptz` or null.
    NullableTimestamptz(Option<DateTime<Utc>>),
}

/// A fixed statement and its values: `$1` is `binds[0]`, and so on.
#[derive(Debug, Clone)]
#[must_use = "a statement runs only when executed or loaded"]
pub struct Prepared<'a> {
    sql: &'a str,
    binds: Vec<Bind<'a>>,
}

impl<'a> Prepared<'a> {
    /// `sql` with `binds` for its placeholders, `$1` the first.
    pub fn new(sql: &'a str, binds: Vec<Bind<'a>>) -> Self {
        Self { sql, binds }
    }
}

impl QueryFragment<Pg> for Prepared<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let mut rest = self.sql;
        while let Some(at) = rest.find('$') {
            out.push_sql(&rest[..at]);
            let digits = rest[at + 1..].bytes().take_while(u8::is_ascii_digit).count();
            let n: usize = rest[at + 1..at + 1 + digits].parse().map_err(|_| {
                diesel::result::Error::QueryBuilderError(
                    format!("`$` without a placeholder number in {}", self.sql).into(),
                )
            })?;
            let bind = self.binds.get(n.wrapping_sub(1)).ok_or_else(|| {
                diesel::result::Error::QueryBuilderError(format!("no value for ${n} in {}", self.sql).into())
            })?;
            match bind {
                Bind::Text(v) => out.push_bind_param::<Text, _>(*v)?,
                Bind::Uuid(v) => out.push_bind_param::<Uuid, _>(v)?,
                Bind::Integer(v) => out.push_bind_param::<Integer, _>(v)?,
                Bind::Double(v) => out.push_bind_param::<Double, _>(v)?,
                Bind::Bool(v) => out.push_bind_param::<Bool, _>(v)?,
                Bind::TextArray(v) => out.push_bind_param::<Array<Text>, _>(v)?,
                Bind::UuidArray(v) => out.push_bind_param::<Array<Uuid>, _>(v)?,
                Bind::IntegerArray(v) => out.push_bind_param::<Array<Integer>, _>(v)?,
                Bind::NullableJsonbArray(v) => out.push_bind_param::<Array<Nullable<Jsonb>>, _>(v)?,
                Bind::NullableUuid(v) => out.push_bind_param::<Nullable<Uuid>, _>(v)?,
                Bind::NullableText(v) => out.push_bind_param::<Nullable<Text>, _>(v)?,
                Bind::NullableJsonb(v) => out.push_bind_param::<Nullable<Jsonb>, _>(v)?,
                Bind::Jsonb(v) => out.push_bind_param::<Jsonb, _>(*v)?,
                Bind::NullableTimestamptz(v) => out.push_bind_param::<Nullable<Timestamptz>, _>(v)?,
            }
            rest = &rest[at + 1 + digits..];
        }
        out.push_sql(rest);
        Ok(())
    }
}

impl QueryId for Prepared<'_> {
    type QueryId = ();
    // Keyed by its SQL text (and bind types) in the connection's statement cache.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for Prepared<'_> {
    type SqlType = Untyped;
}

impl<Conn> diesel::RunQueryDsl<Conn> for Prepared<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::debug_query;

    #[test]
    fn placeholders_are_bound_in_order_and_a_repeated_one_twice() {
        let q = Prepared::new(
            "SELECT $1::text, $2 = ANY($3), $2",
            vec![Bind::Text("a"), Bind::Integer(7), Bind::TextArray(vec!["x".into()])],
        );
        let shown = debug_query::<Pg, _>(&q).to_string();
        assert!(shown.starts_with("SELECT $1::text, $2 = ANY($3), $4"), "{shown}");
        assert!(shown.contains(r#"binds: ["a", 7, ["x"], 7]"#), "{shown}");
    }

    #[test]
    fn a_missing_value_is_an_error_not_a_panic() {
        let q = Prepared::new("SELECT $2", vec![Bind::Integer(1)]);
        let mut sql = String::new();
        let mut builder = diesel::pg::PgQueryBuilder::default();
        let err = q.to_sql(&mut builder, &Pg).map(|_| sql.push_str("built"));
        assert!(err.is_err());
    }
}
