//! Low CPU and I/O priority for the work that reads originals and runs tools, so that a library server stays
//! responsive and its disks are read when nothing else wants them (`worker.nice`, `worker.io_priority`; ADR
//! 0013). The Worker's other threads (heartbeats, claims, the page) keep their priority.
//!
//! Linux gives each thread its own nice value and I/O priority, and an unprivileged thread can lower them but
//! never raise them again. So nothing here lowers a thread that lives on: reading and decoding run on a thread
//! made for the call ([`gently`]), and a tool lowers itself in its child before exec ([`lower_this_thread`]).

use std::sync::RwLock;

/// The I/O priority class (`ioprio_set`), for the block devices of this machine (a network share's server
/// schedules its own disks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoPriority {
    /// Unchanged (the Worker's own).
    Normal,
    /// Best effort at its lowest level (7): served after every other best-effort reader, never starved.
    Low,
    /// Idle: served only when no other process reads the disk; a crawl may wait as long as the disk is busy.
    Idle,
}

impl IoPriority {
    /// Every class, in the settings' words.
    pub const ALL: [IoPriority; 3] = [IoPriority::Normal, IoPriority::Low, IoPriority::Idle];

    /// The class's name in the settings.
    pub fn name(self) -> &'static str {
        match self {
            IoPriority::Normal => "normal",
            IoPriority::Low => "low",
            IoPriority::Idle => "idle",
        }
    }

    /// The class named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// The priority of reading originals and running tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// The nice value to lower to (0 to 19; 0 leaves it; a thread already nicer stays so).
    pub nice: i32,
    /// The I/O class to lower to (a thread already idle stays so).
    pub io: IoPriority,
}

impl Priority {
    /// The default nice value: what `nice` gives a command by default.
    pub const DEFAULT_NICE: i32 = 10;
    /// The Worker's own priority: nothing lowered.
    pub const NORMAL: Priority = Priority { nice: 0, io: IoPriority::Normal };
}

impl Default for Priority {
    fn default() -> Self {
        Self { nice: Self::DEFAULT_NICE, io: IoPriority::Low }
    }
}

static PRIORITY: RwLock<Priority> = RwLock::new(Priority { nice: Priority::DEFAULT_NICE, io: IoPriority::Low });

/// Sets the priority of reading originals and running tools for this process (the Worker sets it once, at
/// start, from its settings; until then it is [`Priority::default`]).
pub fn set_priority(priority: Priority) {
    *PRIORITY.write().unwrap_or_else(|e| e.into_inner()) = priority;
}

/// The priority of reading originals and running tools.
pub fn priority() -> Priority {
    *PRIORITY.read().unwrap_or_else(|e| e.into_inner())
}

/// Runs `work` at [`priority`], on a thread made for it (which ends with it, so no lowered thread is left for
/// anything else), and waits for it. Work that cannot get a thread (the system is out of them) runs here, at
/// this thread's priority. Blocking.
pub fn gently<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    gently_at(priority(), work)
}

fn gently_at<T: Send>(priority: Priority, work: impl FnOnce() -> T + Send) -> T {
    if priority == Priority::NORMAL {
        return work();
    }
    let mut job = Some(work);
    let ran = std::thread::scope(|s| {
        let job = &mut job;
        let thread = std::thread::Builder::new().name("almanac-gentle".into()).spawn_scoped(s, move || {
            // Best effort: a thread that cannot be lowered still does the work.
            let _ = lower_this_thread(priority);
            job.take().map(|work| work())
        });
        thread.ok().map(|t| t.join())
    });
    match ran {
        Some(Ok(Some(done))) => done,
        Some(Err(panicked)) => std::panic::resume_unwind(panicked),
        Some(Ok(None)) | None => (job.take().expect("the work did not run"))(),
    }
}

/// Lowers the calling thread to `priority`, never raising it (an operator who started the Worker nicer keeps
/// that). System calls only, no allocation: sound between fork and exec.
pub(crate) fn lower_this_thread(priority: Priority) -> std::io::Result<()> {
    // The nicer of the two: a nice value already above the asked one stays.
    rustix::process::setpriority_process(None, priority.nice.max(rustix::process::getpriority_process(None)?))?;
    let current = io_priority(0)?;
    match priority.io {
        IoPriority::Normal => Ok(()),
        IoPriority::Low if current.0 == CLASS_IDLE || current == (CLASS_BEST_EFFORT, 7) => Ok(()),
        IoPriority::Low => set_io_priority(CLASS_BEST_EFFORT, 7),
        IoPriority::Idle => set_io_priority(CLASS_IDLE, 0),
    }
}

/// `IOPRIO_CLASS_*` (linux/ioprio.h); a thread never set has class 0 ("none": best effort at a level derived
/// from its nice value).
pub const CLASS_BEST_EFFORT: u32 = 2;
/// See [`CLASS_BEST_EFFORT`].
pub const CLASS_IDLE: u32 = 3;
const IOPRIO_WHO_PROCESS: libc::c_int = 1;
const CLASS_SHIFT: u32 = 13;

/// The I/O priority of thread `tid` (0: the calling thread), as (class, level): `ioprio_get`.
pub fn io_priority(tid: i32) -> std::io::Result<(u32, u32)> {
    // SAFETY: a system call with two integer arguments and no memory passed; async-signal-safe.
    #[allow(unsafe_code)]
    let got = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, tid) };
    if got < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let got = u32::try_from(got).unwrap_or(0);
    Ok((got >> CLASS_SHIFT, got & ((1 << CLASS_SHIFT) - 1)))
}

fn set_io_priority(class: u32, level: u32) -> std::io::Result<()> {
    let value = libc::c_int::try_from((class << CLASS_SHIFT) + level).unwrap_or(0);
    // SAFETY: a system call with three integer arguments and no memory passed; async-signal-safe.
    #[allow(unsafe_code)]
    let set = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, value) };
    if set < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(nice, io class, io level)` of thread `tid` of this process, read from /proc and `ioprio_get`.
    fn thread_priority(tid: i32) -> (i32, u32, u32) {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        // After the name's closing parenthesis: state is field 3, nice field 19.
        let nice = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().nth(16).unwrap().parse().unwrap();
        let (class, level) = io_priority(tid).unwrap();
        (nice, class, level)
    }

    #[test]
    fn gentle_work_runs_on_a_thread_at_the_priority_and_leaves_the_caller_as_it_was() {
        let caller = rustix::thread::gettid().as_raw_nonzero().get();
        let before = thread_priority(caller);
        for (priority, class, level) in [
            (Priority { nice: 12, io: IoPriority::Low }, CLASS_BEST_EFFORT, 7),
            (Priority { nice: 19, io: IoPriority::Idle }, CLASS_IDLE, 0),
        ] {
            let seen = gently_at(priority, || thread_priority(rustix::thread::gettid().as_raw_nonzero().get()));
            assert_eq!(seen, (priority.nice, class, level), "{priority:?}");
        }
        assert_eq!(thread_priority(caller), before, "the calling thread was lowered");
    }

    #[test]
    fn a_thread_is_never_raised() {
        std::thread::spawn(|| {
            lower_this_thread(Priority { nice: 15, io: IoPriority::Idle }).unwrap();
            lower_this_thread(Priority { nice: 5, io: IoPriority::Low }).unwrap();
            let tid = rustix::thread::gettid().as_raw_nonzero().get();
            assert_eq!(thread_priority(tid), (15, CLASS_IDLE, 0));
        })
        .join()
        .unwrap();
    }

    /// A thread at a higher best-effort level than the lowest is lowered to it; the process's setting is what
    /// `gently` runs at, read back as set.
    #[test]
    fn a_thread_at_a_higher_best_effort_level_is_lowered_and_the_setting_reads_back() {
        std::thread::spawn(|| {
            set_io_priority(CLASS_BEST_EFFORT, 4).unwrap();
            let tid = rustix::thread::gettid().as_raw_nonzero().get();
            assert_eq!(io_priority(tid).unwrap(), (CLASS_BEST_EFFORT, 4));
            lower_this_thread(Priority { nice: 0, io: IoPriority::Low }).unwrap();
            assert_eq!(io_priority(tid).unwrap(), (CLASS_BEST_EFFORT, 7));
            assert!(set_io_priority(7, 0).is_err(), "an I/O class the kernel does not have is refused");
        })
        .join()
        .unwrap();
        let before = priority();
        let asked = Priority { nice: 13, io: IoPriority::Idle };
        set_priority(asked);
        assert_eq!(priority(), asked);
        set_priority(before);
        assert_eq!(priority(), before);
    }

    #[test]
    fn the_settings_words_name_each_class() {
        for p in IoPriority::ALL {
            assert_eq!(IoPriority::parse(p.name()), Some(p));
        }
        assert_eq!(IoPriority::parse("lowest"), None);
    }
}
