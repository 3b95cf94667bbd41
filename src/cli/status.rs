//! `vikingfs status [--json]`: the state of the job queues (per queue: pending, running, dead
//! with their last errors, oldest job age). Sections are built by separate functions so other
//! subsystems (locks, index) can add theirs to the same JSON object and text.

use std::time::Duration;

use serde_json::{json, Value};

use super::Ctx;
use crate::queue::{Queue, QueueStats, KNOWN_QUEUES};

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Print one JSON object (`{"queues": {NAME: {...}}}`) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Ctx, args: &StatusArgs) -> anyhow::Result<i32> {
    let ws = ctx.workspace()?;
    let queue = Queue::open(&ws.queue_db())?;
    let stats = queue_stats(&queue)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "queues": queues_json(&stats) }))?
        );
    } else {
        print!("{}", queues_text(&stats));
    }
    Ok(0)
}

/// Stats of every queue with jobs, plus the project's queues even when empty, sorted by name.
pub fn queue_stats(queue: &Queue) -> anyhow::Result<Vec<QueueStats>> {
    let mut stats = queue.stats()?;
    for name in KNOWN_QUEUES {
        if !stats.iter().any(|s| s.queue == *name) {
            stats.push(QueueStats {
                queue: name.to_string(),
                ..QueueStats::default()
            });
        }
    }
    stats.sort_by(|a, b| a.queue.cmp(&b.queue));
    Ok(stats)
}

/// The `"queues"` section: an object keyed by queue name.
pub fn queues_json(stats: &[QueueStats]) -> Value {
    let secs = |d: Duration| (d.as_secs_f64() * 1000.0).round() / 1000.0;
    let map = stats
        .iter()
        .map(|s| {
            let dead: Vec<Value> = s
                .dead_jobs
                .iter()
                .map(|d| {
                    json!({
                        "id": d.id,
                        "key": d.key,
                        "attempts": d.attempts,
                        "error": d.error,
                        "age_secs": secs(d.age),
                    })
                })
                .collect();
            let v = json!({
                "pending": s.pending,
                "retrying": s.retrying,
                "running": s.running,
                "expired": s.expired,
                "dead": s.dead,
                "oldest_age_secs": s.oldest_age.map(secs),
                "last_dead": dead,
            });
            (s.queue.clone(), v)
        })
        .collect();
    Value::Object(map)
}

/// The queue section as text.
pub fn queues_text(stats: &[QueueStats]) -> String {
    let mut out = String::from("queues:\n");
    for s in stats {
        let oldest = s
            .oldest_age
            .map(|d| format!("  oldest {}", human(d)))
            .unwrap_or_default();
        let retrying = if s.retrying > 0 {
            format!(" ({} retrying)", s.retrying)
        } else {
            String::new()
        };
        let expired = if s.expired > 0 {
            format!(
                "  expired {} (worker gone; next claim takes them)",
                s.expired
            )
        } else {
            String::new()
        };
        out += &format!(
            "  {:<15} pending {}{retrying}  running {}{expired}  dead {}{oldest}\n",
            s.queue, s.pending, s.running, s.dead
        );
        for d in &s.dead_jobs {
            let key = d
                .key
                .as_deref()
                .map(|k| format!(" {k}"))
                .unwrap_or_default();
            out += &format!(
                "    dead job {}{key} after {} attempt(s), {} ago: {}\n",
                d.id,
                d.attempts,
                human(d.age),
                d.error
            );
        }
        if s.dead as usize > s.dead_jobs.len() {
            out += &format!(
                "    ... and {} more dead\n",
                s.dead as usize - s.dead_jobs.len()
            );
        }
    }
    out
}

/// `42s`, `7m03s`, `2h05m`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(42)), "42s");
        assert_eq!(human(Duration::from_secs(423)), "7m03s");
        assert_eq!(human(Duration::from_secs(7500)), "2h05m");
    }
}
