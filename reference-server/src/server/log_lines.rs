//! The JSON log lines: tracing-subscriber's JSON format, written without building a map of a span's fields
//! when it is created or reading them back for every line.
//!
//! `tracing_subscriber::fmt().json()` stores a span's fields as a JSON object when the span is created (from
//! a map of `serde_json::Value`s), and then, for every line written inside it, parses that text back into a
//! `serde_json::Value` to write it out, twice per line (the current span, `span`, and the list from the
//! root, `spans`). Every request writes an access line in its span at the default level (`info`), so this
//! was most of the cost of logging: 116,700 instructions per 402 at `info` against 56,300 at `warn`
//! (callgrind, docs/bench/reference-server-licensing.md). [`JsonSpanFields`] stores a span's
//! fields written straight as JSON, and [`JsonLines`] writes the same lines (same members, same values) with
//! each span's stored object copied as it is.

use std::fmt;
use std::io::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::{LookupSpan, SpanRef};

/// The event format of the JSON log lines (with [`JsonSpanFields`] as the field format):
/// `{"timestamp", "level", "fields", "target", "span", "spans"}` as tracing-subscriber's JSON format writes
/// them by default.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct JsonLines;

impl<S> FormatEvent<S, JsonSpanFields> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonSpanFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Vec::with_capacity(512);
        line.extend_from_slice(b"{\"timestamp\":\"");
        timestamp(&mut line, time::OffsetDateTime::now_utc());
        line.extend_from_slice(b"\",\"level\":\"");
        line.extend_from_slice(meta.level().as_str().as_bytes());
        line.extend_from_slice(b"\",\"fields\":{");
        event.record(&mut JsonMembers {
            out: &mut line,
            first: true,
        });
        line.extend_from_slice(b"},\"target\":");
        json(&mut line, meta.target());
        let current = event
            .parent()
            .and_then(|id| ctx.span(id))
            .or_else(|| ctx.lookup_current());
        if let Some(current) = current {
            line.extend_from_slice(b",\"span\":");
            span_object(&mut line, &current);
            line.extend_from_slice(b",\"spans\":[");
            if let Some(leaf) = ctx.lookup_current() {
                for (i, span) in leaf.scope().from_root().enumerate() {
                    if i > 0 {
                        line.push(b',');
                    }
                    span_object(&mut line, &span);
                }
            }
            line.push(b']');
        }
        line.extend_from_slice(b"}\n");
        writer.write_str(std::str::from_utf8(&line).map_err(|_| fmt::Error)?)
    }
}

/// The field format of the JSON log lines: a span's fields stored as one JSON object when the span is
/// created, its members written as [`JsonLines`] writes an event's (tracing-subscriber's `JsonFields` builds
/// a map of `serde_json::Value`s first: 12,300 instructions per request's span; this takes ~3,300, a 402 at
/// `info` counting 9,000 fewer). Members are
/// in the order recorded; a field recorded again later is added again (a reader takes the last, as
/// serde_json does), where `JsonFields` replaces it.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct JsonSpanFields;

impl<'w> FormatFields<'w> for JsonSpanFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        writer.write_str(&json_object(fields))
    }

    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let added = json_object(fields);
        let Some(members) = added.strip_prefix('{').and_then(|a| a.strip_suffix('}')) else {
            return Ok(());
        };
        if members.is_empty() {
            return Ok(());
        }
        let stored = &mut current.fields;
        if stored.len() > 2 && stored.ends_with('}') {
            stored.pop();
            stored.push(',');
            stored.push_str(members);
            stored.push('}');
        } else {
            *stored = added;
        }
        Ok(())
    }
}

/// `fields` as one JSON object.
fn json_object(fields: impl RecordFields) -> String {
    let mut out = Vec::with_capacity(256);
    out.push(b'{');
    fields.record(&mut JsonMembers {
        out: &mut out,
        first: true,
    });
    out.push(b'}');
    // serde_json wrote every key and value (valid UTF-8 text); the braces and commas are ASCII.
    String::from_utf8(out).unwrap_or_else(|_| "{}".to_owned())
}

/// `span`'s fields as [`JsonSpanFields`] stored them (a JSON object), with its `name` added.
fn span_object<S>(out: &mut Vec<u8>, span: &SpanRef<'_, S>)
where
    S: for<'a> LookupSpan<'a>,
{
    let extensions = span.extensions();
    let stored = extensions
        .get::<FormattedFields<JsonSpanFields>>()
        .map(|f| f.fields.trim());
    // The members of the stored object: its text between the braces (`{}` for none).
    match stored.and_then(|s| s.strip_prefix('{')?.strip_suffix('}')) {
        Some(members) => {
            out.push(b'{');
            out.extend_from_slice(members.as_bytes());
            if !members.trim().is_empty() {
                out.push(b',');
            }
        }
        // Not reached (every span's fields are stored as an object); said so rather than lost.
        None => {
            out.extend_from_slice(b"{\"field_error\":\"the span's fields are not a JSON object\",")
        }
    }
    out.extend_from_slice(b"\"name\":");
    json(out, span.metadata().name());
    out.push(b'}');
}

/// Unix time as tracing-subscriber's default timer writes it: RFC 3339, UTC, microseconds. Digits written
/// directly: through `write!` and its padding this was ~2,100 instructions of a 402's access line.
fn timestamp(out: &mut Vec<u8>, t: time::OffsetDateTime) {
    let Ok(year) = u32::try_from(t.year()) else {
        return timestamp_formatted(out, t);
    };
    if year > 9999 {
        return timestamp_formatted(out, t);
    }
    let fields = [
        (year, 4, b'-'),
        (u32::from(u8::from(t.month())), 2, b'-'),
        (u32::from(t.day()), 2, b'T'),
        (u32::from(t.hour()), 2, b':'),
        (u32::from(t.minute()), 2, b':'),
        (u32::from(t.second()), 2, b'.'),
        (t.microsecond(), 6, b'Z'),
    ];
    for (value, width, then) in fields {
        let mut digits = [b'0'; 6];
        let mut rest = value;
        for d in digits[..width].iter_mut().rev() {
            *d = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        out.extend_from_slice(&digits[..width]);
        out.push(then);
    }
}

/// [`timestamp`] through `write!`: years before 0 or after 9999, which fixed widths cannot hold.
fn timestamp_formatted(out: &mut Vec<u8>, t: time::OffsetDateTime) {
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    );
}

/// `value` as JSON (`null` for what JSON cannot say, as a non-finite number is said).
fn json(out: &mut Vec<u8>, value: impl serde::Serialize) {
    let mark = out.len();
    if serde_json::to_writer(&mut *out, &value).is_err() {
        out.truncate(mark);
        out.extend_from_slice(b"null");
    }
}

/// Writes each field an event records as a member of a JSON object (without its braces), as tracing-serde
/// writes an event's fields in tracing-subscriber's JSON format: booleans and 64-bit numbers as JSON, text
/// as a string, anything else (`Debug`, and by `Visit`'s defaults errors, 128-bit numbers and bytes) as the
/// string of its `Debug` form.
struct JsonMembers<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl JsonMembers<'_> {
    fn member(&mut self, field: &Field, value: impl serde::Serialize) {
        if !std::mem::take(&mut self.first) {
            self.out.push(b',');
        }
        json(self.out, field.name());
        self.out.push(b':');
        json(self.out, value);
    }
}

impl Visit for JsonMembers<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.member(field, value);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.member(field, value);
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.member(field, value);
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.member(field, value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.member(field, value);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.member(field, format_args!("{value:?}"));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn timestamps_are_written_as_the_formatted_form() {
        use time::macros::datetime;
        for t in [
            datetime!(1970-01-01 00:00:00 UTC),
            datetime!(2024-02-29 23:59:59.999_999 UTC),
            datetime!(2026-11-29 05:09:58.000_123 UTC),
            datetime!(0001-12-31 09:08:07.654_321 UTC),
            datetime!(9999-12-31 23:59:59.999_999 UTC),
        ] {
            let (mut direct, mut formatted) = (Vec::new(), Vec::new());
            timestamp(&mut direct, t);
            timestamp_formatted(&mut formatted, t);
            assert_eq!(
                String::from_utf8(direct).unwrap(),
                String::from_utf8(formatted).unwrap()
            );
        }
        let mut now = Vec::new();
        timestamp(&mut now, time::OffsetDateTime::now_utc());
        assert_eq!(now.len(), "2026-11-29T05:09:58.000123Z".len());
    }

    /// Every line written, in one buffer.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    /// Lines of every kind the server writes: no span, a request's span, spans in spans, a span without
    /// fields, a field recorded after the span began, an explicit parent; fields of every type.
    fn write_lines() {
        tracing::info!(n = 1u64, "no span");
        let request = tracing::info_span!(
            "request",
            request_id = "r-1",
            method = %"GET",
            path = "/a\"b\\c",
            user_agent = "",
        );
        let _entered = request.enter();
        let error = std::io::Error::other("disk \"full\"");
        tracing::warn!(
            status = 402u16,
            latency_ms = 0.25f64,
            ok = true,
            below = -3i64,
            wide = 1u128 << 100,
            error = &error as &dyn std::error::Error,
            text = "tab\tquote\" é",
            list = ?vec![1, 2],
            "answered {}",
            7
        );
        let settle = tracing::info_span!("x402.settle", payer = %"0xabc");
        settle.in_scope(|| tracing::error!(not_a_number = f64::NAN, "inside"));
        tracing::info_span!("bare").in_scope(|| tracing::info!("a span without fields"));
        let later = tracing::info_span!(
            "later",
            a = 1,
            v = tracing::field::Empty,
            w = tracing::field::Empty
        );
        later.record("v", 5);
        later.record("w", "x");
        let empty = tracing::info_span!("empty", v = tracing::field::Empty);
        empty.record("v", true);
        empty.in_scope(|| tracing::info!("recorded into a span without fields"));
        later.in_scope(|| tracing::debug!("recorded later"));
        tracing::info!(parent: &settle, "an explicit parent");
    }

    /// The lines `write` writes through [`JsonLines`] (every level), each parsed.
    pub(crate) fn captured(write: impl FnOnce()) -> Vec<serde_json::Value> {
        written(true, write)
    }

    /// The lines `write` writes with `json_lines`, or else with tracing-subscriber's JSON format (every
    /// level), each parsed.
    fn written(json_lines: bool, write: impl FnOnce()) -> Vec<serde_json::Value> {
        let out = Lines::default();
        let builder = tracing_subscriber::fmt()
            .with_writer(out.clone())
            .with_max_level(tracing::Level::TRACE);
        if json_lines {
            let subscriber = builder
                .fmt_fields(JsonSpanFields)
                .event_format(JsonLines)
                .finish();
            tracing::subscriber::with_default(subscriber, write);
        } else {
            tracing::subscriber::with_default(builder.json().finish(), write);
        }
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The lines [`write_lines`] writes with `json_lines`, or else with tracing-subscriber's JSON format,
    /// each parsed, its timestamp checked for its form and taken out.
    fn lines(json_lines: bool) -> Vec<serde_json::Value> {
        written(json_lines, write_lines)
            .into_iter()
            .map(|mut line| {
                let stamp = line.as_object_mut().unwrap().remove("timestamp").unwrap();
                let stamp = stamp.as_str().unwrap();
                let parsed = time::OffsetDateTime::parse(
                    stamp,
                    &time::format_description::well_known::Rfc3339,
                );
                assert!(
                    parsed.is_ok() && stamp.len() == 27 && stamp.ends_with('Z'),
                    "{stamp}"
                );
                line
            })
            .collect()
    }

    #[test]
    fn json_lines_say_what_tracing_subscribers_json_lines_say() {
        let ours = lines(true);
        assert_eq!(ours.len(), 7, "{ours:#?}");
        assert_eq!(ours, lines(false));
        // What the access line's readers look for (tests/it/operations.rs reads a real server's).
        assert_eq!(ours[1]["span"]["path"], "/a\"b\\c");
        assert_eq!(ours[1]["spans"][0]["name"], "request");
        assert_eq!(ours[2]["spans"][1]["payer"], "0xabc");
    }
}
