//! Results: one `Record` per measured run, printed as a Markdown row for people and
//! appended as a JSON line for `bench/report.py`, plus the /proc readings (CPU ticks,
//! RSS) that go into them. It must not run workloads.

use std::io::Write;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Linux reports utime/stime in USER_HZ, which is 100 on every Linux ABI we run on.
const TICKS_PER_S: f64 = 100.0;

/// One measured run of one workload on one system.
#[derive(Debug, Default)]
pub struct Record {
    /// The driver's name (`Driver::NAME`): `concord`, `zookeeper`, `etcd`, ...
    pub system: String,
    /// Servers in the cluster (a label given on the command line).
    pub nodes: usize,
    /// Workload name, e.g. `write`, `read-linearizable`, `watch-100`.
    pub workload: String,
    /// Concurrent clients.
    pub clients: usize,
    /// Successful operations in the measured window.
    pub ops: u64,
    /// Failed operations in the measured window.
    pub errors: u64,
    /// Length of the measured window, seconds.
    pub duration_s: f64,
    /// Latency of each successful operation, microseconds.
    pub latency_us: Option<Histogram<u64>>,
    /// This process's CPU over the window, percent of one core.
    pub client_cpu_pct: Option<f64>,
    /// The servers' CPU over the window (summed over all given pids), percent of one core.
    pub server_cpu_pct: Option<f64>,
    /// Workload-specific numbers (e.g. `overlaps`, `rss_mib`, `restart_ms`).
    pub extra: Vec<(&'static str, f64)>,
    /// Why the run did not happen, or anything a reader must know.
    pub note: String,
}

impl Record {
    fn quantile_ms(&self, q: f64) -> Option<f64> {
        let h = self.latency_us.as_ref().filter(|h| !h.is_empty())?;
        Some(h.value_at_quantile(q) as f64 / 1000.0)
    }

    fn max_ms(&self) -> Option<f64> {
        let h = self.latency_us.as_ref().filter(|h| !h.is_empty())?;
        Some(h.max() as f64 / 1000.0)
    }

    /// Successful operations per second.
    pub fn ops_per_s(&self) -> f64 {
        if self.duration_s > 0.0 {
            self.ops as f64 / self.duration_s
        } else {
            0.0
        }
    }

    /// The record as one JSON object on one line.
    pub fn to_json(&self) -> String {
        let num = |v: Option<f64>| v.map_or("null".to_owned(), |v| format!("{v:.3}"));
        let mut out = format!(
            "{{\"system\":\"{}\",\"nodes\":{},\"workload\":\"{}\",\"clients\":{},\"ops\":{},\
             \"errors\":{},\"duration_s\":{:.3},\"ops_s\":{:.1},\"p50_ms\":{},\"p99_ms\":{},\
             \"p999_ms\":{},\"max_ms\":{},\"client_cpu_pct\":{},\"server_cpu_pct\":{}",
            self.system,
            self.nodes,
            self.workload,
            self.clients,
            self.ops,
            self.errors,
            self.duration_s,
            self.ops_per_s(),
            num(self.quantile_ms(0.5)),
            num(self.quantile_ms(0.99)),
            num(self.quantile_ms(0.999)),
            num(self.max_ms()),
            num(self.client_cpu_pct),
            num(self.server_cpu_pct),
        );
        for (name, value) in &self.extra {
            out.push_str(&format!(",\"{name}\":{value:.3}"));
        }
        out.push_str(&format!(",\"note\":\"{}\"}}", escape(&self.note)));
        out
    }

    /// The record as a Markdown table row (see `HEADER`).
    pub fn to_row(&self) -> String {
        let num = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        let extra: Vec<String> = self
            .extra
            .iter()
            .map(|(k, v)| format!("{k}={v:.1}"))
            .collect();
        format!(
            "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} {} |",
            self.system,
            self.nodes,
            self.workload,
            self.clients,
            self.ops_per_s(),
            num(self.quantile_ms(0.5)),
            num(self.quantile_ms(0.99)),
            num(self.quantile_ms(0.999)),
            num(self.max_ms()),
            num(self.client_cpu_pct),
            num(self.server_cpu_pct),
            self.errors,
            extra.join(" "),
            self.note,
        )
    }

    /// Prints the row and appends the JSON line to `out` (if given).
    pub fn emit(&self, out: Option<&std::path::Path>) -> std::io::Result<()> {
        println!("{}", self.to_row());
        if let Some(path) = out {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            writeln!(file, "{}", self.to_json())?;
        }
        Ok(())
    }
}

/// Header of the Markdown rows printed by `Record::to_row`.
pub const HEADER: &str = "| system | nodes | workload | clients | ops/s | p50 ms | p99 ms | \
p99.9 ms | max ms | client cpu % | server cpu % | errors | notes |\n\
|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|";

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', " ")
}

/// utime + stime of a process, in ticks (`self` for this process); None if unreadable.
pub fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 of `rest`.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Total CPU ticks of the given pids (None if any is unreadable).
pub fn cpu_ticks_sum(pids: &[String]) -> Option<u64> {
    pids.iter().map(|p| cpu_ticks(p)).sum()
}

/// CPU use between two tick readings over `elapsed`, as percent of one core.
pub fn cpu_pct(before: Option<u64>, after: Option<u64>, elapsed: Duration) -> Option<f64> {
    let ticks = after?.checked_sub(before?)?;
    let secs = elapsed.as_secs_f64();
    (secs > 0.0).then(|| ticks as f64 / TICKS_PER_S / secs * 100.0)
}

/// Resident set size of a process in MiB (VmRSS), None if unreadable.
pub fn rss_mib(pid: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_ticks_and_rss_are_readable() {
        assert!(cpu_ticks("self").is_some());
        assert!(rss_mib("self").is_some_and(|m| m > 0.0));
    }

    #[test]
    fn cpu_pct_is_ticks_over_time() {
        let pct = cpu_pct(Some(100), Some(150), Duration::from_secs(1));
        assert_eq!(pct, Some(50.0));
        assert_eq!(cpu_pct(None, Some(1), Duration::from_secs(1)), None);
    }

    #[test]
    fn json_has_every_field_and_escapes_notes() {
        let r = Record {
            system: "etcd".into(),
            nodes: 3,
            workload: "write".into(),
            clients: 16,
            ops: 100,
            duration_s: 2.0,
            extra: vec![("overlaps", 0.0)],
            note: "a \"quoted\" note".into(),
            ..Default::default()
        };
        let json = r.to_json();
        assert!(json.contains("\"ops_s\":50.0"), "{json}");
        assert!(json.contains("\"p50_ms\":null"), "{json}");
        assert!(json.contains("\"overlaps\":0.000"), "{json}");
        assert!(json.contains("a \\\"quoted\\\" note"), "{json}");
    }

    #[test]
    fn quantiles_come_from_the_latency_histogram() {
        let mut h = crate::workloads::new_histogram();
        for ms in 1..=100u64 {
            h.record(ms * 1000).unwrap();
        }
        let r = Record {
            latency_us: Some(h),
            ..Default::default()
        };
        let json = r.to_json();
        let field = |name: &str| -> f64 {
            let at = json.find(&format!("\"{name}\":")).unwrap() + name.len() + 3;
            let end = json[at..].find(',').unwrap() + at;
            json[at..end].parse().unwrap()
        };
        // Three significant digits: within 0.1% of the exact value.
        for (name, exact) in [("p50_ms", 50.0), ("p99_ms", 99.0), ("max_ms", 100.0)] {
            let got = field(name);
            assert!(
                (got - exact).abs() <= exact * 0.001,
                "{name}: {got} in {json}"
            );
        }
    }
}
