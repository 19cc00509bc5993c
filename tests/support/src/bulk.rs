//! The bulk-throughput protocol the tunnel benchmarks share (the gate's against tinyproxy, the
//! relay's through a door's two relays): after whatever a path needs to open, the client sends
//! `U` + a big-endian u64 and that many bytes, and the sink acks with the same u64 (upload); or
//! `D` + u64, and the sink sends that many bytes (download). Timed at the client, in MB/s, with
//! the CPU time each end's thread spent on it: a relay's cost per byte, set beside the ends' own,
//! says what it would reach with a core of its own, which the elapsed time on a small machine
//! cannot.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// The size of every write and read.
pub const CHUNK: usize = 1024 * 1024; // 1 MiB

/// One bulk transfer as its end saw it.
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    /// Megabytes (10^6) a second, from the command to the last byte or the ack.
    pub mb_per_s: f64,
    /// CPU time this end's thread spent on it, the kernel's work on its behalf included.
    pub cpu: Duration,
}

/// CPU time the calling thread has used so far.
pub fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// The sink's side of one bulk command whose byte (`U` or `D`) was already read: the length,
/// then the bytes. Returns the CPU time this thread spent on it. Any other command is an error
/// naming it. A sender that stops early ends it without an ack.
pub fn serve(stream: &mut (impl Read + Write), command: u8) -> io::Result<Duration> {
    let start = thread_cpu();
    let mut len = [0u8; 8];
    stream.read_exact(&mut len)?;
    let mut left = u64::from_be_bytes(len);
    let mut buffer = vec![0x5au8; CHUNK];
    match command {
        b'D' => {
            while left > 0 {
                let n = left.min(CHUNK as u64) as usize;
                stream.write_all(&buffer[..n])?;
                left -= n as u64;
            }
        }
        b'U' => {
            while left > 0 {
                let want = left.min(CHUNK as u64) as usize;
                let n = stream.read(&mut buffer[..want])?;
                if n == 0 {
                    return Ok(thread_cpu() - start);
                }
                left -= n as u64;
            }
            stream.write_all(&len)?;
        }
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unknown bulk command {other:#04x}"),
            ))
        }
    }
    Ok(thread_cpu() - start)
}

/// `bytes` sent from the client to the sink, timed until the sink's ack.
///
/// # Panics
/// If the stream fails or the ack differs: the benchmark has nothing to report.
pub fn upload(stream: &mut (impl Read + Write + ?Sized), bytes: u64) -> Transfer {
    let buffer = vec![0xa5u8; CHUNK];
    let start = Started::now();
    send_command(stream, b'U', bytes);
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        stream.write_all(&buffer[..n]).expect("upload write");
        left -= n as u64;
    }
    let mut ack = [0u8; 8];
    stream.read_exact(&mut ack).expect("upload ack");
    assert_eq!(
        u64::from_be_bytes(ack),
        bytes,
        "the sink acked another length"
    );
    start.done(bytes)
}

/// `bytes` sent from the sink to the client, timed until the client has them all.
///
/// # Panics
/// If the stream fails or ends early: the benchmark has nothing to report.
pub fn download(stream: &mut (impl Read + Write + ?Sized), bytes: u64) -> Transfer {
    let mut buffer = vec![0u8; CHUNK];
    let start = Started::now();
    send_command(stream, b'D', bytes);
    let mut left = bytes;
    while left > 0 {
        let want = left.min(CHUNK as u64) as usize;
        let n = stream.read(&mut buffer[..want]).expect("download read");
        assert!(n > 0, "the download ended early, {left} bytes short");
        left -= n as u64;
    }
    start.done(bytes)
}

fn send_command(stream: &mut (impl Write + ?Sized), command: u8, bytes: u64) {
    let mut header = [0u8; 9];
    header[0] = command;
    header[1..].copy_from_slice(&bytes.to_be_bytes());
    stream.write_all(&header).expect("bulk command");
}

/// The middle of a benchmark's rounds (the upper one of an even count), which a slow spell of
/// a shared machine in one round does not move.
///
/// # Panics
/// If there are no rounds.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// When a transfer started, by the clock and by this thread's CPU time.
struct Started {
    at: Instant,
    cpu: Duration,
}

impl Started {
    fn now() -> Self {
        Started {
            at: Instant::now(),
            cpu: thread_cpu(),
        }
    }

    fn done(self, bytes: u64) -> Transfer {
        Transfer {
            mb_per_s: bytes as f64 / 1e6 / self.at.elapsed().as_secs_f64(),
            cpu: thread_cpu() - self.cpu,
        }
    }
}
