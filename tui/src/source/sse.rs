//! Server-sent events: `event:` and `data:` lines, a blank line ends an event (WHATWG HTML, "server-sent events").

use std::io::BufRead;

#[derive(Debug, Clone, PartialEq)]
pub(super) struct SseEvent {
    /// `message` when the server names none.
    pub event: String,
    pub data: String,
}

/// Reads events until the stream ends or `on_event` returns false. Comment lines (`:`) are keep-alives.
pub(super) fn read_events(reader: impl BufRead, mut on_event: impl FnMut(SseEvent) -> bool) -> std::io::Result<()> {
    let mut event = String::new();
    let mut data: Vec<String> = Vec::new();
    for line in reader.lines() {
        let line = line?;
        if line.is_empty() {
            if !data.is_empty() {
                let name = if event.is_empty() { "message".to_string() } else { std::mem::take(&mut event) };
                if !on_event(SseEvent { event: name, data: data.join("\n") }) {
                    return Ok(());
                }
            }
            event.clear();
            data.clear();
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line.as_str(), ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = value.to_string(),
            "data" => data.push(value.to_string()),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_on_blank_lines_and_multi_line_data_is_joined() {
        let text = ": keep-alive\nevent: op\ndata: {\"a\":\ndata: 1}\n\ndata: plain\n\nevent: x\n";
        let mut got = Vec::new();
        read_events(text.as_bytes(), |e| {
            got.push(e);
            true
        })
        .unwrap();
        assert_eq!(
            got,
            vec![
                SseEvent { event: "op".into(), data: "{\"a\":\n1}".into() },
                SseEvent { event: "message".into(), data: "plain".into() },
            ]
        );
    }
}
