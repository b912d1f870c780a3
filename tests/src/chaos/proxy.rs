//! A TCP proxy on loopback between one process and one store address that can cut the process
//! off: while cut, nothing it or the store sends gets through (connections stay open, as
//! behind a network partition that drops packets); once mended, what was held back is
//! delivered, as TCP's retransmissions would.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

/// A proxy to one address; dropped, it takes no more connections (those it has end with
/// them).
#[derive(Debug)]
pub(crate) struct CutProxy {
    address: SocketAddr,
    cut: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
}

impl CutProxy {
    /// Starts a proxy to `target` (`127.0.0.1:PORT`).
    pub(crate) fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
        let address = listener.local_addr().expect("the proxy's address");
        let (cut, closed) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (flag, stop) = (Arc::clone(&cut), Arc::clone(&closed));
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(server) = TcpStream::connect(target) {
                    connect(client, server, &flag);
                }
            }
        });
        Self {
            address,
            cut,
            closed,
        }
    }

    /// Its address, `127.0.0.1:PORT`.
    pub(crate) fn address(&self) -> SocketAddr {
        self.address
    }

    /// Cuts (`true`) or mends (`false`) the link.
    pub(crate) fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut.store(false, Ordering::SeqCst);
        self.closed.store(true, Ordering::SeqCst);
        // Wakes the listener, which sees it is closed.
        TcpStream::connect(self.address).ok();
    }
}

fn connect(client: TcpStream, server: TcpStream, cut: &Arc<AtomicBool>) {
    for stream in [&client, &server] {
        stream.set_nodelay(true).ok();
    }
    let (Ok(client_out), Ok(server_out)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    forward(client, server_out, Arc::clone(cut));
    forward(server, client_out, Arc::clone(cut));
}

/// Sends what `from` reads to `to`, holding it while the link is cut.
fn forward(mut from: TcpStream, mut to: TcpStream, cut: Arc<AtomicBool>) {
    thread::spawn(move || {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(read @ 1..) = from.read(&mut buffer) {
            while cut.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5));
            }
            if to.write_all(&buffer[..read]).is_err() {
                break;
            }
        }
        to.shutdown(Shutdown::Write).ok();
    });
}
