//! Finding the processes of a lingering `egress-selftest` job (its spec's
//! `linger_seconds`): the process it left behind sleeps with a mark on its
//! command line (`kolm_jobs::selftest_job::LINGER_MARK`); the job itself is
//! the `kolm-jobs` process beside it (the same parent: the job's PID
//! namespace init as root, else the supervisor, a child subreaper). The
//! job's command line names only files (its spec says how long it lingers).

/// The lingering process's mark for a linger of `seconds`.
pub fn mark(seconds: u32) -> String {
    format!("{seconds}{}", kolm_jobs::selftest_job::LINGER_MARK)
}

/// The parent pid of `pid`, from `/proc/PID/status`.
fn parent(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|p| p.trim().parse().ok())
}

/// The `kolm-jobs` processes whose lingering process of `seconds` is alive.
pub fn job_of(seconds: u32) -> Vec<u32> {
    let parents: Vec<u32> = kolm_testkit::processes_with(&[&mark(seconds)])
        .into_iter()
        .filter_map(parent)
        .collect();
    kolm_testkit::processes_with(&["kolm-jobs", "--spec"])
        .into_iter()
        .filter(|&p| parent(p).is_some_and(|pp| parents.contains(&pp)))
        .collect()
}
