//! (b)'s floor: what the parts of a probe cost alone, on the same squids and the same kind
//! of thread, so that the prober's cost reads against what no probe of this shape can go
//! below on this machine.
//!
//! The operator's probe is a new TCP connection to the proxy, a `CONNECT` and its answer,
//! then TLS 1.3 through the tunnel in two exchanges (the client's hello for the server's
//! flight; the client's `Finished` with the request for the session tickets with the
//! answer), then a reset. Its parts, measured apart:
//! - the tunnel: a connection, `CONNECT` and its answer, a reset ([`through_tunnel`] with no
//!   exchange);
//! - the tunnel and two exchanges of the sizes the probe's TLS sends and receives, with a
//!   plain endpoint behind squid that answers as many bytes as the origin's TLS does
//!   ([`answerer`]): the kernel's, squid's wake-ups and the runtime's part, with no
//!   cryptography;
//! - TLS alone, in memory ([`tls_alone`]): the prober's own configuration against the
//!   origin's, a resumed handshake and one request, timing the client's calls only.
//!
//! The last two together are a probe with nothing else: no engine, no parsing of URLs or
//! answers, and warm caches for the cryptography.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxy_tests::probe_origin;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{
    ClientConfig, ClientConnection, ConnectionCommon, HandshakeKind, ServerConfig, ServerConnection,
};

/// Handshakes made before the timed ones: the first fills the session store (it is a full
/// handshake), the rest warm the caches.
const WARM_UP: usize = 100;

/// A request of the size of the prober's (`proxy_operator::health::probe`).
const REQUEST: &[u8] = b"GET /generate_204?run=B1&p=b000 HTTP/1.1\r\nHost: probe.test\r\nUser-Agent: proxy-operator/0.1.0 (probe)\r\nAccept: */*\r\nConnection: close\r\n\r\n";

/// The probe origin's answer to it ([`probe_origin`]).
const ANSWER: &[u8] = b"HTTP/1.1 204 X\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n";

/// What the plain exchanges send: bytes of no meaning, as many as TLS would.
static FILLER: [u8; 16 * 1024] = [0; 16 * 1024];

/// The bytes each side of a probe's TLS sends in its two exchanges.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flights {
    /// The client's hello; its `Finished` with the request.
    pub client: [usize; 2],
    /// The server's hello to its `Finished`; its session tickets with the answer and its
    /// `close_notify`.
    pub server: [usize; 2],
}

/// What [`tls_alone`] measured.
#[derive(Debug)]
pub struct TlsAlone {
    /// The client's time in its calls per handshake and request, the median of the rounds,
    /// in microseconds.
    pub client_micros: f64,
    /// The share of the timed rounds whose handshake resumed a session.
    pub resumed: f64,
    /// The sizes of the last round's flights.
    pub flights: Flights,
}

/// `rounds` TLS handshakes and requests between `client` and `server` in memory, after
/// [`WARM_UP`] untimed ones. Only the client's calls are timed, each with the monotonic clock:
/// they run on this thread and never wait, so their time is CPU time (less whatever the
/// scheduler takes, which the median leaves out).
pub fn tls_alone(
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    rounds: usize,
) -> anyhow::Result<TlsAlone> {
    let name = ServerName::try_from(probe_origin::HOST)?;
    let mut micros = Vec::with_capacity(rounds);
    let (mut resumed, mut flights) = (0, Flights::default());
    let (mut to_server, mut to_client) = (Vec::new(), Vec::new());
    for round in 0..WARM_UP + rounds {
        let mut client_time = Duration::ZERO;

        let started = Instant::now();
        let mut tls = ClientConnection::new(client.clone(), name.clone())?;
        drain(&mut tls, &mut to_server)?;
        client_time += started.elapsed();
        let mut origin = ServerConnection::new(server.clone())?;
        feed(&mut origin, &to_server)?;
        drain(&mut origin, &mut to_client)?;
        flights.client[0] = to_server.len();
        flights.server[0] = to_client.len();

        let started = Instant::now();
        feed(&mut tls, &to_client)?;
        tls.writer().write_all(REQUEST)?;
        drain(&mut tls, &mut to_server)?;
        client_time += started.elapsed();
        feed(&mut origin, &to_server)?;
        let mut request = Vec::new();
        origin.reader().read_to_end(&mut request).ok();
        anyhow::ensure!(request == REQUEST, "the server read no whole request");
        origin.writer().write_all(ANSWER)?;
        origin.send_close_notify();
        drain(&mut origin, &mut to_client)?;
        flights.client[1] = to_server.len();
        flights.server[1] = to_client.len();

        let started = Instant::now();
        feed(&mut tls, &to_client)?;
        let mut answer = Vec::new();
        tls.reader().read_to_end(&mut answer)?;
        let kind = tls.handshake_kind();
        // The probe's session ends here too: its buffers freed, its secrets wiped.
        drop(tls);
        client_time += started.elapsed();
        anyhow::ensure!(answer == ANSWER, "the client read no whole answer");

        if round >= WARM_UP {
            micros.push(1e6 * client_time.as_secs_f64());
            resumed += usize::from(kind == Some(HandshakeKind::Resumed));
        }
    }
    micros.sort_by(f64::total_cmp);
    Ok(TlsAlone {
        client_micros: micros.get(micros.len() / 2).copied().unwrap_or(0.0),
        resumed: resumed as f64 / rounds.max(1) as f64,
        flights,
    })
}

/// Hands `bytes` from the peer to `tls`, and processes them.
fn feed<D>(tls: &mut ConnectionCommon<D>, mut bytes: &[u8]) -> anyhow::Result<()> {
    while !bytes.is_empty() {
        tls.read_tls(&mut bytes)?;
        tls.process_new_packets()?;
    }
    Ok(())
}

/// Replaces `into` with everything `tls` has to send.
fn drain<D>(tls: &mut ConnectionCommon<D>, into: &mut Vec<u8>) -> anyhow::Result<()> {
    into.clear();
    while tls.wants_write() {
        tls.write_tls(into)?;
    }
    Ok(())
}

/// Starts, on the current runtime, a plain TCP endpoint on 127.0.0.1 that answers like the
/// probe origin's TLS in size: `flights.server[i]` bytes once `flights.client[i]` more have
/// arrived. Returns its address.
pub async fn answerer(flights: Flights) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = vec![0; flights.client.into_iter().max().unwrap_or(0)];
                for (asked, answered) in flights.client.into_iter().zip(flights.server) {
                    if stream.read_exact(&mut buffer[..asked]).await.is_err()
                        || stream.write_all(filler(answered)).await.is_err()
                    {
                        return;
                    }
                }
                // Until the client resets the connection.
                let _ = stream.read(&mut buffer).await;
            });
        }
    });
    Ok(address)
}

/// `len` bytes of [`FILLER`], or all of it: a TLS flight of a probe is a few hundred bytes.
fn filler(len: usize) -> &'static [u8] {
    FILLER.get(..len).unwrap_or(&FILLER)
}

/// Opens a tunnel through `proxy` to `target` as the probe does, then makes the exchanges of
/// `flights` through it, if any (what the client sends, then as many bytes back as the
/// server answers), then resets the connection. Returns whether every step went through.
pub async fn through_tunnel(proxy: String, target: SocketAddr, flights: Option<Flights>) -> bool {
    let Ok(mut stream) = TcpStream::connect(&proxy).await else {
        return false;
    };
    // The prober's socket options (`segments_that_count` in the probe's wire module), so that
    // the segments are the probe's.
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(&stream).set_tcp_quickack(false);
    let _ = stream.set_zero_linger();
    let connect = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    if stream.write_all(connect.as_bytes()).await.is_err() {
        return false;
    }
    let mut buffer = vec![0; 4096];
    let mut read = 0;
    while !buffer[..read].windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer[read..]).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => read += n,
        }
    }
    if !buffer.starts_with(b"HTTP/1.1 200") {
        return false;
    }
    let Some(flights) = flights else {
        return true;
    };
    for (sent, answered) in flights.client.into_iter().zip(flights.server) {
        if stream.write_all(filler(sent)).await.is_err() {
            return false;
        }
        let mut received = 0;
        while received < answered {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => received += n,
            }
        }
    }
    true
}
