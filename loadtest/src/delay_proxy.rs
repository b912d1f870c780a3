//! A TCP proxy on loopback that delays every byte by a fixed time in each direction: a real
//! network's round trip in front of a store on the same machine (`--delay-us`).
//!
//! Plain threads, not Tokio: Tokio's timers tick in whole milliseconds, and the delays wanted
//! here are fractions of one. Each direction of a connection has a reader, which stamps what
//! it reads with when it is due, and a writer, which sleeps until then and sends it on, in
//! order: the delay adds latency, not a bandwidth limit.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Starts a proxy to `target` delaying each direction by `delay`; returns its address. It runs
/// until the process ends.
pub fn start(target: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
    let address = listener.local_addr().expect("the proxy's address");
    thread::spawn(move || {
        for client in listener.incoming().flatten() {
            match TcpStream::connect(target) {
                Ok(server) => connect(client, server, delay),
                Err(error) => eprintln!("delay proxy: cannot reach {target}: {error}"),
            }
        }
    });
    address
}

/// Forwards both directions between `client` and `server`.
fn connect(client: TcpStream, server: TcpStream, delay: Duration) {
    for stream in [&client, &server] {
        stream.set_nodelay(true).ok();
    }
    let (Ok(client_out), Ok(server_out)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    forward(client, server_out, delay);
    forward(server, client_out, delay);
}

/// Sends what `from` reads to `to`, each chunk `delay` after it was read.
fn forward(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (chunks, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(read @ 1..) = from.read(&mut buffer) {
            if chunks
                .send((Instant::now() + delay, buffer[..read].to_vec()))
                .is_err()
            {
                break;
            }
        }
    });
    thread::spawn(move || {
        for (at, chunk) in due {
            let wait = at.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                thread::sleep(wait);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        to.shutdown(Shutdown::Write).ok();
    });
}
