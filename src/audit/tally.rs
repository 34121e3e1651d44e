//! Counting audit events that anyone can repeat at will: authentication failures.
//!
//! A caller with no valid token can fail authentication as fast as it can send requests.
//! Writing each failure as its own hash-chained entry would let it fill the disk and keep
//! the audit writer busy. [`Tally`] (kept by [`super::writer::AuditBatcher`] and counted
//! on the caller's thread) lets through, at once, the first event of a quiet spell
//! (same project, action and resource) and counts its repeats for [`WINDOW`]. When the window
//! ends, a count becomes one entry, the last repeat with ` count=<n>` added to its resource,
//! and the next window opens. A window that ends with nothing counted closes. However fast an
//! event repeats, it is written at most once at once and then once a window, and the counts
//! add up to every occurrence.

use super::AuditEvent;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long repeats of an event are counted before their count is written.
pub const WINDOW: Duration = Duration::from_secs(1);

/// What identifies repeats: project, action and resource.
type Key = (String, String, String);

/// An open window.
#[derive(Debug)]
struct Window {
    ends: Instant,
    /// Repeats counted in it.
    count: u64,
    /// The newest repeat, written with the count.
    last: Option<AuditEvent>,
}

/// The open windows, one per distinct event.
#[derive(Debug, Default)]
pub struct Tally {
    open: HashMap<Key, Window>,
}

impl Tally {
    /// Notes `event` at `now`: it comes back when it is to be written at once (no window
    /// open for it), otherwise it is counted.
    pub fn note(&mut self, event: AuditEvent, now: Instant) -> Option<AuditEvent> {
        let key = (
            event.project.clone(),
            event.action.clone(),
            event.resource.clone(),
        );
        match self.open.get_mut(&key) {
            Some(window) => {
                window.count += 1;
                window.last = Some(event);
                None
            }
            None => {
                let window = Window {
                    ends: now + WINDOW,
                    count: 0,
                    last: None,
                };
                self.open.insert(key, window);
                Some(event)
            }
        }
    }

    /// Ends the windows due at `now`; returns their count entries. A window that counted
    /// something opens again, one that counted nothing closes.
    pub fn due(&mut self, now: Instant) -> Vec<AuditEvent> {
        let mut out = Vec::new();
        self.open.retain(|_, window| {
            if window.ends > now {
                return true;
            }
            match window.last.take() {
                Some(last) => {
                    out.push(count_entry(last, window.count));
                    window.count = 0;
                    window.ends = now + WINDOW;
                    true
                }
                None => false,
            }
        });
        out
    }

    /// Every count still open, as entries (the writer is stopping).
    pub fn drain(&mut self) -> Vec<AuditEvent> {
        self.open
            .drain()
            .filter_map(|(_, window)| window.last.map(|last| count_entry(last, window.count)))
            .collect()
    }

    /// When the next window ends.
    pub fn next_due(&self) -> Option<Instant> {
        self.open.values().map(|window| window.ends).min()
    }
}

fn count_entry(mut last: AuditEvent, count: u64) -> AuditEvent {
    last.resource = format!("{} count={count}", last.resource);
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(project: &str, status: u16, at: i64) -> AuditEvent {
        AuditEvent {
            at_micros: at,
            action: "auth.failure".into(),
            project: project.into(),
            entity: String::new(),
            resource: format!("route=proxy status={status}"),
        }
    }

    #[test]
    fn the_first_is_written_at_once_and_repeats_are_counted_until_the_window_ends() {
        let t0 = Instant::now();
        let mut tally = Tally::default();
        assert_eq!(
            tally.note(failure("p", 401, 1), t0),
            Some(failure("p", 401, 1))
        );
        // Another status and another project are other events.
        assert!(tally.note(failure("p", 403, 2), t0).is_some());
        assert!(tally.note(failure("q", 401, 3), t0).is_some());
        for at in 4..104 {
            assert_eq!(tally.note(failure("p", 401, at), t0), None);
        }
        assert_eq!(tally.next_due(), Some(t0 + WINDOW));
        assert!(tally.due(t0 + WINDOW / 2).is_empty());

        let written = tally.due(t0 + WINDOW);
        let mut last = failure("p", 401, 103);
        last.resource.push_str(" count=100");
        assert_eq!(written, vec![last]);
        // The windows of the events that did not repeat closed; the repeated one is open
        // again, and counts what follows.
        assert_eq!(tally.open.len(), 1);
        assert_eq!(tally.note(failure("p", 401, 200), t0 + WINDOW), None);
        let mut last = failure("p", 401, 200);
        last.resource.push_str(" count=1");
        assert_eq!(tally.drain(), vec![last]);
        assert_eq!(tally.next_due(), None);
    }

    #[test]
    fn a_window_that_counted_nothing_closes_and_the_next_event_is_written_at_once() {
        let t0 = Instant::now();
        let mut tally = Tally::default();
        assert!(tally.note(failure("p", 401, 1), t0).is_some());
        assert!(tally.due(t0 + WINDOW).is_empty());
        assert_eq!(tally.next_due(), None);
        assert!(tally.note(failure("p", 401, 2), t0 + WINDOW).is_some());
        assert!(tally.drain().is_empty());
    }
}
