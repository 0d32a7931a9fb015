//! `wirekit kerberos`: NEX Kerberos tools.
//!
//! `derive --pid N --password P` prints the key as 32 hex characters. `derive --batch FILE`
//! (`-` for stdin) reads lines `pid,password` (the password is the rest of the line, commas
//! included, raw bytes; a trailing `\r` is dropped; blank lines are skipped) and prints one key
//! per line in input order, deriving them on the batch path (the CPU's widest SIMD lanes, on
//! every core). A bad line stops the run with its line number on stderr and exit status 2; the
//! keys of the chunks of 2048 lines before its own have been printed, none of its chunk. A
//! stdout that cannot be written (closed by its reader too) ends the run with exit status 1.
//! On a terminal, large inputs get a progress bar on stderr.

use super::ToolError;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use wirekit_accel::kerberos::{LanePath, derive_kerberos_keys};
use wirekit_core::kerberos::{DerivedKey, KeyRequest, derive_kerberos_key};

/// `wirekit kerberos` subcommands.
#[derive(Subcommand)]
pub enum KerberosCommand {
    /// Derive NEX Kerberos keys from PIDs and passwords.
    Derive(DeriveArgs),
}

/// Arguments of `wirekit kerberos derive`.
#[derive(Args)]
#[command(group(ArgGroup::new("input").required(true).args(["password", "batch"])))]
pub struct DeriveArgs {
    /// The user's PID.
    #[arg(long, requires = "password")]
    pub pid: Option<u64>,
    /// The user's password.
    #[arg(long, requires = "pid")]
    pub password: Option<OsString>,
    /// A file of `pid,password` lines (`-` for stdin); prints one key per line.
    #[arg(long, conflicts_with_all = ["pid", "password"])]
    pub batch: Option<PathBuf>,
}

/// Runs a `wirekit kerberos` subcommand.
pub fn run(cmd: KerberosCommand) -> ExitCode {
    match cmd {
        KerberosCommand::Derive(args) => derive(args),
    }
}

fn derive(args: DeriveArgs) -> ExitCode {
    if let (Some(pid), Some(password)) = (args.pid, &args.password) {
        // A closed stdout is a failed run, not a panic.
        let key = hex(&derive_kerberos_key(pid, password.as_encoded_bytes()));
        return match writeln!(std::io::stdout().lock(), "{key}") {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => ToolError::Output(e).report("wirekit kerberos derive"),
        };
    }
    let Some(path) = args.batch else {
        return ExitCode::from(2);
    };
    let (input, size): (Box<dyn BufRead>, Option<u64>) = if path.as_os_str() == "-" {
        (Box::new(io::stdin().lock()), None)
    } else {
        match File::open(&path) {
            Ok(f) => {
                let size = f.metadata().ok().map(|m| m.len());
                (Box::new(BufReader::new(f)), size)
            }
            Err(e) => {
                eprintln!("wirekit kerberos derive: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
    };
    let progress = progress_bar(size);
    let stdout = io::stdout().lock();
    let result = derive_batch(input, BufWriter::new(stdout), &progress);
    progress.finish_and_clear();
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(BatchFailure::Input { line, reason }) => {
            eprintln!("wirekit kerberos derive: line {line}: {reason}");
            ExitCode::from(2)
        }
        Err(BatchFailure::Read(e)) => ToolError::Input(format!("reading {}: {e}", path.display()))
            .report("wirekit kerberos derive"),
        Err(BatchFailure::Write(e)) => ToolError::Output(e).report("wirekit kerberos derive"),
    }
}

/// Inputs at least this large get a progress bar (a few seconds of work on one core).
const PROGRESS_MIN_BYTES: u64 = 16 * 1024;

fn progress_bar(size: Option<u64>) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match size {
        Some(n) if n >= PROGRESS_MIN_BYTES => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        Some(_) => ProgressBar::hidden(),
        None => ProgressBar::new_spinner(),
    }
}

/// Why a batch stopped.
#[derive(Debug)]
enum BatchFailure {
    /// A line is not `pid,password`.
    Input { line: u64, reason: &'static str },
    /// Reading the input failed (exit status 2, as a bad line).
    Read(io::Error),
    /// Writing the keys failed (exit status 1).
    Write(io::Error),
}

/// Lines derived per batch call: enough to keep every lane of every core busy, few enough that
/// memory stays small and keys stream out while a large file is read.
const CHUNK_LINES: usize = 2048;

/// Longest accepted line: a PID, a comma and a password of up to 64 KiB.
const MAX_LINE: usize = 64 * 1024 + 32;

/// A batch also ends once its lines hold this many bytes: 2048 lines of 64 KiB passwords
/// would otherwise hold (and keep, as spare buffers) some 256 MiB.
const CHUNK_BYTES: u64 = 4 << 20;

/// Derives the key of every `pid,password` line of `input` onto `out`, in order; returns the
/// number of keys.
fn derive_batch(
    mut input: impl BufRead,
    mut out: impl Write,
    progress: &ProgressBar,
) -> Result<u64, BatchFailure> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    progress.set_message(format!("{} lanes x {threads} threads", LanePath::detect()));
    let mut lines: Vec<Vec<u8>> = Vec::with_capacity(CHUNK_LINES);
    let mut pids: Vec<u64> = Vec::with_capacity(CHUNK_LINES);
    let mut keys: Vec<DerivedKey> = vec![[0; 16]; CHUNK_LINES];
    let mut line_no = 0u64;
    let mut done = 0u64;
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let mut ended = false;
    loop {
        // Read up to a chunk of lines.
        let mut bytes_read = 0u64;
        while !ended && lines.len() < CHUNK_LINES && bytes_read < CHUNK_BYTES {
            let mut line = spare.pop().unwrap_or_default();
            line.clear();
            let n = io::Read::take(&mut input, MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(BatchFailure::Read)?;
            if n == 0 {
                ended = true;
                break;
            }
            line_no += 1;
            bytes_read += n as u64;
            if line.last() == Some(&b'\n') {
                line.pop();
            } else if line.len() > MAX_LINE {
                return Err(BatchFailure::Input {
                    line: line_no,
                    reason: "line longer than 64 KiB",
                });
            } else {
                // A last line without its newline: `read_until` stopped at the input's end,
                // which is not read again.
                ended = true;
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            // A blank line (a trailing one, a separator) holds no key to derive.
            if line.iter().all(u8::is_ascii_whitespace) {
                line.clear();
                line.shrink_to(256);
                spare.push(line);
                continue;
            }
            let comma = line
                .iter()
                .position(|&b| b == b',')
                .ok_or(BatchFailure::Input {
                    line: line_no,
                    reason: "expected `pid,password`",
                })?;
            let pid = std::str::from_utf8(&line[..comma])
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or(BatchFailure::Input {
                    line: line_no,
                    reason: "the pid is not an unsigned 64-bit integer",
                })?;
            pids.push(pid);
            line.drain(..=comma);
            lines.push(line);
        }
        // (A chunk of blank lines alone holds nothing to derive, and is not the end.)
        if lines.is_empty() {
            if ended {
                out.flush().map_err(BatchFailure::Write)?;
                return Ok(done);
            }
            progress.inc(bytes_read);
            continue;
        }
        let requests: Vec<KeyRequest<'_>> = pids
            .iter()
            .zip(&lines)
            .map(|(&pid, password)| KeyRequest { pid, password })
            .collect();
        let keys = &mut keys[..requests.len()];
        derive_on_threads(&requests, keys, threads);
        for key in keys.iter() {
            out.write_all(hex(key).as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .map_err(BatchFailure::Write)?;
        }
        done += requests.len() as u64;
        progress.inc(bytes_read);
        if progress.length().is_none() {
            progress.set_message(format!("{done} keys"));
        }
        // Kept for the next chunk at a short password's size: a chunk whose lines hold
        // 64 KiB passwords would otherwise leave that much in each spare buffer, up to
        // `CHUNK_LINES` of them (128 MiB) over chunks that fill different buffers.
        // (Cleared first: `shrink_to` keeps at least the length, and the password with it.)
        for mut line in lines.drain(..) {
            line.fill(0);
            line.clear();
            line.shrink_to(256);
            spare.push(line);
        }
        pids.clear();
        // The input's end came with this chunk: not read again (a terminal would wait for a
        // second end-of-file).
        if ended {
            out.flush().map_err(BatchFailure::Write)?;
            return Ok(done);
        }
    }
}

/// Splits a batch over `threads` threads, each on the CPU's best lane path.
fn derive_on_threads(requests: &[KeyRequest<'_>], keys: &mut [DerivedKey], threads: usize) {
    let per_thread = requests.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        for (reqs, out) in requests.chunks(per_thread).zip(keys.chunks_mut(per_thread)) {
            s.spawn(move || {
                // `out` has exactly `reqs.len()` entries, so this cannot fail.
                let _ = derive_kerberos_keys(reqs, out);
            });
        }
    });
}

fn hex(key: &DerivedKey) -> String {
    use std::fmt::Write as _;
    key.iter().fold(String::with_capacity(32), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8]) -> (Result<u64, BatchFailure>, String) {
        let mut out = Vec::new();
        let r = derive_batch(input, &mut out, &ProgressBar::hidden());
        (r, String::from_utf8(out).unwrap())
    }

    /// Input whose end is read once: a second read after it panics (a terminal would block
    /// there, waiting for another end-of-file).
    struct EndsOnce<'a> {
        data: &'a [u8],
        ended: bool,
    }

    impl io::Read for EndsOnce<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            assert!(!self.ended, "read again after its end");
            let n = self.data.len().min(buf.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            self.ended = n == 0;
            Ok(n)
        }
    }

    #[test]
    fn the_input_is_not_read_past_its_end() {
        for data in [&b"7,x\n"[..], b"7,x", b"", b"\n\n"] {
            let input = BufReader::new(EndsOnce { data, ended: false });
            let mut out = Vec::new();
            let r = derive_batch(input, &mut out, &ProgressBar::hidden());
            assert_eq!(r.unwrap(), u64::from(data.starts_with(b"7")));
        }
    }

    #[test]
    fn batch_lines_in_order() {
        let input = b"100,MMQea3n!fsik\n5,a,b\r\n1099511627776,\n7,x";
        let (r, out) = run(input);
        assert_eq!(r.unwrap(), 4);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "9ef318f0a170fb46aab595bf9644f9e1");
        assert_eq!(lines[1], hex(&derive_kerberos_key(5, b"a,b")));
        assert_eq!(lines[2], hex(&derive_kerberos_key(1 << 40, b"")));
        assert_eq!(lines[3], hex(&derive_kerberos_key(7, b"x")));
    }

    #[test]
    fn blank_lines_are_skipped_and_still_counted() {
        let (r, out) = run(b"\n100,MMQea3n!fsik\n\r\n  \t\n7,x\n\n");
        assert_eq!(r.unwrap(), 2);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines,
            [
                "9ef318f0a170fb46aab595bf9644f9e1",
                &hex(&derive_kerberos_key(7, b"x"))
            ]
        );
        // Line numbers count the blank lines.
        let (r, _) = run(b"1,a\n\nbad\n");
        assert!(matches!(r, Err(BatchFailure::Input { line: 3, .. })));
        let (r, out) = run(b"\n\n");
        assert_eq!(r.unwrap(), 0);
        assert!(out.is_empty());
        // More blank lines than a chunk's bytes, then a line: a chunk of blank lines alone is
        // not the input's end.
        let mut input = vec![b'\n'; CHUNK_BYTES as usize + 10];
        input.extend_from_slice(b"7,x\n");
        let (r, out) = run(&input);
        assert_eq!(r.unwrap(), 1);
        assert_eq!(out.trim_end(), hex(&derive_kerberos_key(7, b"x")));
    }

    #[test]
    fn bad_lines_name_their_number() {
        let (r, out) = run(b"1,ok\nnot a line\n");
        assert!(matches!(r, Err(BatchFailure::Input { line: 2, .. })));
        assert!(
            out.is_empty(),
            "a chunk is printed only when all of it parsed"
        );
        let (r, _) = run(b"-1,pw\n");
        assert!(matches!(r, Err(BatchFailure::Input { line: 1, .. })));
        let mut long = b"1,".to_vec();
        long.resize(MAX_LINE + 10, b'x');
        let (r, _) = run(&long);
        assert!(matches!(r, Err(BatchFailure::Input { line: 1, .. })));
        let (r, out) = run(b"");
        assert_eq!(r.unwrap(), 0);
        assert!(out.is_empty());
    }
}
