//! `make sim`: every read policy on the seed workloads over modelled legs, as Markdown tables
//! (a summary, then the detail of each workload). Deterministic: the same numbers every run.
//!
//!     cargo run --release -p mirrorfs-sim [-- SECONDS]

use mirrorfs_sim::{detail_table, run_all, summary_table, workload::seed_workloads};

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let workloads = seed_workloads((seconds * 1e6) as u64);
    let all: Vec<_> = workloads.iter().map(|w| (w, run_all(w))).collect();
    println!("### Summary: total MB/s (best of each row in bold)\n");
    println!("{}", summary_table(&all));
    println!("### Detail\n");
    for (w, results) in &all {
        println!("{}", detail_table(w, results));
    }
}
