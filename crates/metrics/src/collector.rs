use std::collections::BTreeMap;

use crate::connections::{ConnHistograms, SecondHandshakes};
use crate::recorder::WorkerMessage;
use crate::recorder::{GroupAcc, SendTimes, TransportWaits};
use crate::{Counters, Histogram, SecondRow};

/// A second that just became complete across all workers: what the live view prints.
#[derive(Debug, Clone)]
pub struct Progress {
    pub row: SecondRow,
}

/// A second with nothing in it yet: counters, answers' latency, handshake times.
fn empty_second() -> (Counters, Histogram, SecondHandshakes) {
    (Counters::default(), Histogram::new(2), SecondHandshakes::default())
}

/// Merges the workers' per-second samples into the series and the totals, on one thread.
/// A second is final once every worker has moved past it.
pub struct Collector {
    watermarks: Vec<u32>,
    pending: BTreeMap<u32, (Counters, Histogram, SecondHandshakes)>,
    next: u32,
    series: SeriesStore,
    totals: Counters,
    latency: Histogram,
    lateness: Histogram,
    schedule_lateness: Histogram,
    waits: TransportWaits,
    send: SendTimes,
    peak_on_wire: u64,
    in_flight: u64,
    cpu_ns: u64,
    conns: ConnHistograms,
    groups: Vec<GroupAcc>,
    finals: usize,
    /// Connections open so far (opened minus closed), for the series' `active`.
    active: i64,
    /// Connections draining so far (drains begun minus ended), for the series' `draining`.
    draining: i64,
    draining_peak: u64,
    /// The workers' query traces (`--trace-queries`), each with its worker's number, and the
    /// number asked for.
    trace: Vec<(usize, Vec<crate::TraceSlot>)>,
    trace_cap: usize,
}

/// What the collector hands over at the end of a run.
pub struct Collected {
    pub series: Vec<SecondRow>,
    pub totals: Counters,
    pub latency: Histogram,
    pub lateness: Histogram,
    /// How late the scheduler handed queries to their lanes (the generator's own lateness).
    pub schedule_lateness: Histogram,
    /// How long queries waited for their transport, by cause.
    pub waits: TransportWaits,
    /// Service times, the generator's delays, and how departures were timed.
    pub send: SendTimes,
    /// The sum of each worker's peak of queries on the wire (sent, not yet ended).
    pub peak_on_wire: u64,
    pub in_flight: u64,
    pub cpu_ns: u64,
    pub conns: ConnHistograms,
    /// Per group of clients, when a mixture had several.
    pub groups: Vec<GroupAcc>,
    /// The most connections draining at the end of any second.
    pub draining_peak: u64,
    /// The first queries' trace, when one was asked for.
    pub trace: Option<crate::QueryTrace>,
}

impl Collector {
    pub fn new(workers: usize) -> Collector {
        Collector {
            watermarks: vec![0; workers],
            pending: BTreeMap::new(),
            next: 0,
            series: SeriesStore::default(),
            totals: Counters::default(),
            latency: Histogram::new(3),
            lateness: Histogram::new(3),
            schedule_lateness: Histogram::new(3),
            waits: TransportWaits::default(),
            send: SendTimes::default(),
            peak_on_wire: 0,
            in_flight: 0,
            cpu_ns: 0,
            conns: ConnHistograms::default(),
            groups: Vec::new(),
            finals: 0,
            active: 0,
            draining: 0,
            draining_peak: 0,
            trace: Vec::new(),
            trace_cap: 0,
        }
    }

    /// The row of one second, with the connections open at its end.
    fn row(&mut self, second: u32, (c, h, hs): &(Counters, Histogram, SecondHandshakes)) -> SecondRow {
        let mut row = SecondRow::of(second, c, h);
        if let Some(conns) = row.connections.as_mut() {
            hs.fill(conns);
        }
        self.active += c.conns.opened as i64 - c.conns.closed_total() as i64;
        self.draining += c.conns.drains as i64 - c.conns.drains_ended() as i64;
        let (active, draining) = (self.active.max(0) as u64, self.draining.max(0) as u64);
        self.draining_peak = self.draining_peak.max(draining);
        if let Some(conns) = row.connections.as_mut() {
            conns.active = active;
            conns.draining = draining;
        } else if active > 0 {
            row.connections = Some(crate::SecondConnections { active, draining, ..Default::default() });
        }
        row
    }

    /// True once every worker sent its final message.
    pub fn done(&self) -> bool {
        self.finals == self.watermarks.len()
    }

    /// Takes one worker message; returns the seconds that became complete.
    pub fn absorb(&mut self, msg: WorkerMessage) -> Vec<Progress> {
        match msg {
            WorkerMessage::Second(s) => {
                let e = self.pending.entry(s.second).or_insert_with(empty_second);
                e.0.merge(&s.counters);
                e.1.merge(&s.latency);
                e.2.merge(&s.handshake);
                self.totals.merge(&s.counters);
                if let Some(w) = self.watermarks.get_mut(s.worker) {
                    *w = (*w).max(s.watermark);
                }
            }
            WorkerMessage::Final(f) => {
                self.latency.merge(&f.latency);
                self.lateness.merge(&f.lateness);
                self.schedule_lateness.merge(&f.schedule_lateness);
                self.waits.merge(&f.waits);
                self.send.merge(&f.send);
                self.peak_on_wire += f.peak_on_wire;
                self.in_flight += f.in_flight;
                self.cpu_ns += f.cpu_ns;
                self.conns.merge(&f.conns);
                if self.groups.len() < f.groups.len() {
                    self.groups.resize(f.groups.len(), GroupAcc::default());
                }
                for (a, b) in self.groups.iter_mut().zip(f.groups.iter()) {
                    a.merge(b);
                }
                if f.trace_cap > 0 {
                    self.trace_cap = self.trace_cap.max(f.trace_cap);
                    self.trace.push((f.worker, f.trace));
                }
                self.finals += 1;
                if let Some(w) = self.watermarks.get_mut(f.worker) {
                    *w = u32::MAX;
                }
            }
        }
        let through = self.watermarks.iter().copied().min().unwrap_or(0);
        let mut out = Vec::new();
        while self.next < through {
            // Stop at the last second anyone reported once every worker is done.
            if through == u32::MAX && self.pending.range(self.next..).next().is_none() {
                break;
            }
            let second = self.pending.remove(&self.next).unwrap_or_else(empty_second);
            let row = self.row(self.next, &second);
            self.series.push(&row);
            out.push(Progress { row });
            self.next += 1;
        }
        out
    }

    /// Ends collection (every worker finished, or the run is torn down): remaining seconds
    /// are emitted in order.
    pub fn finish(mut self) -> Collected {
        let last = self.pending.keys().next_back().copied();
        if let Some(last) = last {
            while self.next <= last {
                let second = self.pending.remove(&self.next).unwrap_or_else(empty_second);
                let row = self.row(self.next, &second);
                self.series.push(&row);
                self.next += 1;
            }
        }
        Collected {
            series: self.series.finish(),
            totals: self.totals,
            latency: self.latency,
            lateness: self.lateness,
            schedule_lateness: self.schedule_lateness,
            waits: self.waits,
            send: self.send,
            peak_on_wire: self.peak_on_wire,
            in_flight: self.in_flight,
            cpu_ns: self.cpu_ns,
            conns: self.conns,
            groups: self.groups,
            draining_peak: self.draining_peak,
            trace: (self.trace_cap > 0).then(|| crate::QueryTrace::of_workers(self.trace_cap as u64, &self.trace)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Recorder;

    #[test]
    fn long_series_spill_and_come_back_in_order() {
        let (tx, rx) = std::sync::mpsc::channel();
        let s = 1_000_000_000u64;
        let mut a = Recorder::new(0, 0, tx);
        for k in 0..150u64 {
            for _ in 0..=k % 3 {
                a.issued(k * s + 1, 0);
            }
        }
        a.finish(150 * s, 0, &[], 1);
        let mut c = Collector::new(1);
        for m in rx.try_iter() {
            c.absorb(m);
        }
        let got = c.finish();
        // 150 seconds with sends, and the last (empty) second the worker finished in.
        assert_eq!(got.series.len(), 151);
        for (k, r) in got.series.iter().take(150).enumerate() {
            assert_eq!(r.second as usize, k);
            assert_eq!(r.issued, k as u64 % 3 + 1);
        }
        assert_eq!(got.series.iter().map(|r| r.issued).sum::<u64>(), got.totals.issued);
    }

    #[test]
    fn seconds_merge_in_order_and_sum_to_totals() {
        let (tx, rx) = std::sync::mpsc::channel();
        let s = 1_000_000_000u64;
        let mut a = Recorder::new(0, 0, tx.clone());
        let mut b = Recorder::new(1, 0, tx);
        a.issued(10, 0);
        a.answered(20, 1000, 0, false, 60, 0);
        b.issued(s + 5, 0);
        b.timed_out(3 * s + 1, 0);
        a.issued(2 * s, 0);
        a.answered(2 * s + 9, 2000, 3, false, 60, 0);
        a.finish(2 * s + 10, 0, &[], 5);
        b.finish(3 * s + 2, 0, &[], 7);
        let mut c = Collector::new(2);
        let mut seen = Vec::new();
        for m in rx.try_iter() {
            seen.extend(c.absorb(m).into_iter().map(|p| p.row.second));
        }
        assert!(c.done());
        let got = c.finish();
        assert_eq!(got.series.iter().map(|r| r.second).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert_eq!(seen, vec![0, 1, 2, 3]);
        assert_eq!(got.series.iter().map(|r| r.issued).sum::<u64>(), got.totals.issued);
        assert_eq!(got.totals.issued, 3);
        assert_eq!(got.totals.answered + got.totals.timed_out, 3);
        assert_eq!(got.totals.ended() + got.in_flight, got.totals.issued);
        assert_eq!(got.series[2].rcodes.get("NXDOMAIN"), Some(&1));
        assert_eq!(got.latency.count(), 2);
        assert_eq!(got.cpu_ns, 12);
    }
}

/// The rows of the series so far. Past the first minute they go to an unlinked temporary file
/// (one JSON line each) and come back at the end, so a run's memory does not grow with its
/// length; where no temporary file can be made they stay in memory.
#[derive(Default)]
struct SeriesStore {
    rows: Vec<SecondRow>,
    spill: Option<std::io::BufWriter<std::fs::File>>,
    spilled: usize,
    failed: bool,
}

/// Rows kept in memory before spilling.
const IN_MEMORY_ROWS: usize = 60;

impl SeriesStore {
    fn push(&mut self, row: &SecondRow) {
        if self.rows.len() < IN_MEMORY_ROWS || self.failed {
            self.rows.push(row.clone());
            return;
        }
        if self.spill.is_none() {
            match spill_file() {
                Ok(f) => self.spill = Some(std::io::BufWriter::new(f)),
                Err(_) => {
                    self.failed = true;
                    self.rows.push(row.clone());
                    return;
                }
            }
        }
        let w = self.spill.as_mut().expect("just set");
        let ok = serde_json::to_writer(&mut *w, row).is_ok() && std::io::Write::write_all(w, b"\n").is_ok();
        if ok {
            self.spilled += 1;
        } else {
            self.failed = true;
            self.rows.push(row.clone());
        }
    }

    fn finish(mut self) -> Vec<SecondRow> {
        use std::io::{BufRead, Seek};
        let Some(w) = self.spill.take() else { return self.rows };
        let mut out = std::mem::take(&mut self.rows);
        let spilled_rows = (|| -> std::io::Result<Vec<SecondRow>> {
            let mut f = w.into_inner().map_err(|e| e.into_error())?;
            f.seek(std::io::SeekFrom::Start(0))?;
            std::io::BufReader::new(f)
                .lines()
                .map(|l| l.and_then(|l| serde_json::from_str(&l).map_err(std::io::Error::other)))
                .collect()
        })();
        // Rows pushed after a spill failure were kept in memory; they follow the spilled ones.
        let late = out.split_off(IN_MEMORY_ROWS.min(out.len()));
        if let Ok(rows) = spilled_rows {
            out.extend(rows);
        }
        out.extend(late);
        out
    }
}

/// An unlinked temporary file: gone with the process, whatever happens.
fn spill_file() -> std::io::Result<std::fs::File> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(".volley-series-{}-{n}", std::process::id()));
    let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    let _ = std::fs::remove_file(&path);
    Ok(f)
}
