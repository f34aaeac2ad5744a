//! TLS through the tunnel, driven by hand over the TCP connection.
//!
//! A general TLS stream (tokio-rustls) sends the client's last handshake flight as soon as
//! the handshake is done, then the request in a segment of its own, and on shutdown a
//! `close_notify`. On loopback every segment the prober sends also runs the receiver's side
//! of TCP, and wakes squid, on the prober's CPU. Here the client's `Finished` waits in
//! rustls's buffer until the request is written, and both leave in one write; nothing is sent
//! when the probe is done (the connection is closed, [`super::wire`]). The handshake itself
//! is rustls's, unchanged: the same configuration, the same checks of the server, the same
//! resumed sessions.

use std::io::{self, ErrorKind, Read, Write as _};
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

/// A TLS client session over a TCP connection the caller keeps, after its handshake.
///
/// Errors are I/O errors; a TLS failure is one whose inner error is a [`rustls::Error`], and
/// a peer that closes during the handshake is an [`ErrorKind::UnexpectedEof`].
pub(super) struct Tls {
    tls: ClientConnection,
    /// The TLS records waiting to be written, reused between writes.
    outgoing: Vec<u8>,
}

impl Tls {
    /// Makes the handshake with `name` over `tcp`. The client's last flight is left unsent:
    /// it goes with the first [`Tls::send`].
    pub async fn handshake(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        tcp: &mut TcpStream,
    ) -> io::Result<Self> {
        let mut session = Self {
            tls: ClientConnection::new(config, name).map_err(tls_error)?,
            outgoing: Vec::with_capacity(1024),
        };
        while session.tls.is_handshaking() {
            session.flush(tcp).await?;
            session.read_records(tcp).await?;
        }
        Ok(session)
    }

    /// Writes `plaintext`, after whatever the handshake left to send, in one write.
    pub async fn send(&mut self, tcp: &mut TcpStream, plaintext: &[u8]) -> io::Result<()> {
        self.tls.writer().write_all(plaintext)?;
        self.flush(tcp).await
    }

    /// Appends what the server sends next to `into`: at least one byte, or `Ok(0)` once the
    /// server has ended the TLS session (`close_notify`). A TCP end without one is an
    /// [`ErrorKind::UnexpectedEof`].
    pub async fn receive(&mut self, tcp: &TcpStream, into: &mut Vec<u8>) -> io::Result<usize> {
        loop {
            let start = into.len();
            match self.tls.reader().read_to_end(into) {
                // Data, or the session's clean end.
                Ok(_) => return Ok(into.len() - start),
                // Data, and then nothing more for now.
                Err(error) if error.kind() == ErrorKind::WouldBlock && into.len() > start => {
                    return Ok(into.len() - start);
                }
                Err(error) if error.kind() == ErrorKind::WouldBlock => {
                    self.read_records(tcp).await?
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Writes every TLS record rustls has ready.
    async fn flush(&mut self, tcp: &mut TcpStream) -> io::Result<()> {
        self.outgoing.clear();
        while self.tls.wants_write() {
            self.tls.write_tls(&mut self.outgoing)?;
        }
        if !self.outgoing.is_empty() {
            tcp.write_all(&self.outgoing).await?;
        }
        Ok(())
    }

    /// Waits for the server's next bytes and hands them to rustls. The end of the TCP stream
    /// is left to rustls too: it makes reading fail with [`ErrorKind::UnexpectedEof`] unless
    /// the server ended the session first.
    async fn read_records(&mut self, tcp: &TcpStream) -> io::Result<()> {
        loop {
            tcp.readable().await?;
            match self.tls.read_tls(&mut Ready(tcp)) {
                Ok(0) if self.tls.is_handshaking() => {
                    return Err(io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "the server closed the connection during the TLS handshake",
                    ));
                }
                Ok(_) => break,
                Err(error) if error.kind() == ErrorKind::WouldBlock => {}
                Err(error) => return Err(error),
            }
        }
        self.tls.process_new_packets().map_err(tls_error)?;
        Ok(())
    }
}

/// Reads what the socket already holds, without waiting: [`Read`] for rustls's `read_tls`.
struct Ready<'a>(&'a TcpStream);

impl Read for Ready<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

/// A rustls error as the I/O error the probe classifies (`io_cause` looks inside).
fn tls_error(error: rustls::Error) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, error)
}
