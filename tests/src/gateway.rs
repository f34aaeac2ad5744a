//! The gateway as a real process: `proxy-operator gateway` (the binary the operator tests
//! build), in front of a discovery API, with tenants written into a directory of its own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::operator::DISCOVERY_TOKEN;
use crate::ports::Port;
use crate::run_dir::subdir;

/// The tenant the tests' clients use, and its token.
pub const TENANT: (&str, &str) = ("acme", "acme-token-0123456789");

/// A running gateway; killed when dropped.
#[derive(Debug)]
pub struct Gateway {
    child: Child,
    /// Where its log goes.
    pub log: PathBuf,
    /// `127.0.0.1:PORT`, the proxy address clients use.
    pub addr: String,
    /// URL of its metrics.
    pub metrics: String,
    _ports: [Port; 2],
}

impl Gateway {
    /// Starts `binary`'s gateway for the discovery API at `discovery` (which takes
    /// [`DISCOVERY_TOKEN`]), with the tenant [`TENANT`] and `extra_args`, and waits until it
    /// accepts connections.
    pub fn start(binary: &Path, name: &str, discovery: &str, extra_args: &[&str]) -> Self {
        let dir = subdir(&format!("gateway-{name}"));
        let tenants = dir.join("tenants");
        std::fs::create_dir_all(&tenants).expect("the tenants directory");
        std::fs::write(tenants.join(TENANT.0), TENANT.1).expect("a tenant's token");
        let log = dir.join("gateway.log");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open the gateway log");
        let ports = [Port::reserve(), Port::reserve()];
        let addr = format!("127.0.0.1:{}", ports[0].number());
        let metrics = format!("127.0.0.1:{}", ports[1].number());
        let child = Command::new(binary)
            .arg("gateway")
            .args(["--listen", &addr, "--metrics-addr", &metrics])
            .arg(format!("--holder=gateway:{name}"))
            .args(["--discovery-url", discovery])
            .arg("--tenants-dir")
            .arg(&tenants)
            .args(extra_args)
            .env("DISCOVERY_TOKEN", DISCOVERY_TOKEN)
            .env("RUST_LOG", "info,proxy_operator=debug")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start proxy-operator gateway");
        let mut gateway = Self {
            child,
            log,
            addr,
            metrics: format!("http://{metrics}/metrics"),
            _ports: ports,
        };
        gateway.wait_listening();
        gateway
    }

    /// Waits (10 s at most) until the gateway accepts connections.
    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(&self.addr).is_ok() {
                return;
            }
            if let Ok(Some(exit)) = self.child.try_wait() {
                panic!("the gateway exited ({exit}):\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the gateway does not listen on {}:\n{}",
            self.addr,
            self.log()
        );
    }

    /// `http://<username>:<token>@127.0.0.1:PORT`, a client's proxy URL.
    pub fn proxy_url(&self, username: &str) -> String {
        format!("http://{username}:{}@{}", TENANT.1, self.addr)
    }

    /// What the gateway logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bytes of the test bodies, computed once: byte `i` of every body is
/// `(31 i ^ (i >> 12)) as u8`, so a body that lost, doubled or swapped a piece is told from
/// the right one. Compared a slice at a time (a `memcmp`, fast in a debug build too): the
/// site must read an upload at least as fast as squid forwards it, or Debian's squid 5.7
/// aborts the upload (squid bug 5405, fixed in 6.11: once its request buffer is full it
/// takes its next read of 0 bytes for the client's end).
#[derive(Debug, Clone)]
pub struct Pattern(std::sync::Arc<[u8]>);

impl Pattern {
    /// The first `len` bytes of the pattern: bodies up to that long.
    pub fn new(len: u64) -> Self {
        Self(
            (0..len)
                .map(|i| (i.wrapping_mul(31) ^ (i >> 12)) as u8)
                .collect(),
        )
    }

    /// A body of `len` bytes, if the pattern is that long.
    pub fn body(&self, len: u64) -> Option<&[u8]> {
        self.0.get(..usize::try_from(len).ok()?)
    }

    /// A check of a body that arrives in pieces.
    pub fn checker(&self) -> Checked {
        Checked {
            pattern: self.clone(),
            len: 0,
            first_wrong: None,
        }
    }
}

/// Where a body first differs from the [`Pattern`] (`None`: nowhere) and how long it is.
#[derive(Debug, Clone)]
pub struct Checked {
    pattern: Pattern,
    /// Its length.
    pub len: u64,
    /// The offset of its first byte that is not the pattern's.
    pub first_wrong: Option<u64>,
}

impl Checked {
    /// Adds `bytes`, the next of the body.
    pub fn add(&mut self, bytes: &[u8]) {
        if self.first_wrong.is_none() {
            let at = self.len as usize;
            let expected = self.pattern.0.get(at..).unwrap_or_default();
            let expected = &expected[..bytes.len().min(expected.len())];
            if expected != bytes {
                let same = expected.iter().zip(bytes).take_while(|(a, b)| a == b);
                self.first_wrong = Some(self.len + same.count() as u64);
            }
        }
        self.len += bytes.len() as u64;
    }
}

/// A site for uploads and downloads of any size, over plain HTTP and over TLS (its own CA,
/// a certificate for 127.0.0.1): `POST /upload` reads the body (Content-Length or chunked)
/// as it comes, checks it against the [`Pattern`] and answers `<length> <first wrong offset
/// or ->`; `GET /bytes/<n>` answers the pattern's first `n` bytes. Neither keeps a body.
/// It runs on a thread of its own, so that a test's other work never slows its reading
/// (see [`Pattern`] for why that matters); it stops when dropped.
#[derive(Debug)]
pub struct BodySite {
    /// `http://127.0.0.1:PORT`.
    pub http: String,
    /// `https://127.0.0.1:PORT`.
    pub https: String,
    /// Its CA certificate, PEM.
    pub ca_pem: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl BodySite {
    /// Starts it, with bodies of `pattern`.
    pub fn start(pattern: Pattern) -> anyhow::Result<Self> {
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
        let ca = crate::certs::Ca::new("body-site-ca");
        let leaf = ca.server(&["127.0.0.1"]);
        let provider =
            std::sync::Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let tls = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes())?],
                PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes())?,
            )?;
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(tls));
        let plain = std::net::TcpListener::bind("127.0.0.1:0")?;
        let secure = std::net::TcpListener::bind("127.0.0.1:0")?;
        let (http, https) = (
            format!("http://{}", plain.local_addr()?),
            format!("https://{}", secure.local_addr()?),
        );
        for listener in [&plain, &secure] {
            listener.set_nonblocking(true)?;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("body-site".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let (Ok(plain), Ok(secure)) = (
                        tokio::net::TcpListener::from_std(plain),
                        tokio::net::TcpListener::from_std(secure),
                    ) else {
                        return;
                    };
                    let plain_pattern = pattern.clone();
                    let serve_plain = async move {
                        while let Ok((stream, _)) = plain.accept().await {
                            tokio::spawn(serve_bodies(stream, plain_pattern.clone()));
                        }
                    };
                    let serve_secure = async move {
                        while let Ok((stream, _)) = secure.accept().await {
                            let (acceptor, pattern) = (acceptor.clone(), pattern.clone());
                            tokio::spawn(async move {
                                if let Ok(stream) = acceptor.accept(stream).await {
                                    serve_bodies(stream, pattern).await;
                                }
                            });
                        }
                    };
                    tokio::select! {
                        _ = stopped => {}
                        () = serve_plain => {}
                        () = serve_secure => {}
                    }
                });
            })?;
        Ok(Self {
            http,
            https,
            ca_pem: ca.cert_pem,
            _stop: stop,
        })
    }
}

/// One connection of the [`BodySite`]: requests until the client leaves.
async fn serve_bodies(
    stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    pattern: Pattern,
) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let mut stream = BufReader::with_capacity(64 * 1024, stream);
    loop {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read_until(b'\n', &mut head).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let header = |name: &str| {
            head.lines().find_map(|line| {
                let (n, v) = line.split_once(':')?;
                (n.trim() == name).then(|| v.trim().to_owned())
            })
        };
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let mut checked = pattern.checker();
        let mut chunk = vec![0; 64 * 1024];
        if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            loop {
                let mut line = String::new();
                if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                let Ok(mut size) = u64::from_str_radix(line.trim(), 16) else {
                    return;
                };
                if size == 0 {
                    let mut end = String::new();
                    let _ = stream.read_line(&mut end).await;
                    break;
                }
                while size > 0 {
                    let want = chunk.len().min(size as usize);
                    let Ok(n @ 1..) = stream.read(&mut chunk[..want]).await else {
                        return;
                    };
                    checked.add(&chunk[..n]);
                    size -= n as u64;
                }
                let mut crlf = [0; 2];
                if stream.read_exact(&mut crlf).await.is_err() {
                    return;
                }
            }
        } else {
            let mut left: u64 = header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while left > 0 {
                let want = chunk.len().min(left as usize);
                let Ok(n @ 1..) = stream.read(&mut chunk[..want]).await else {
                    return;
                };
                checked.add(&chunk[..n]);
                left -= n as u64;
            }
        }
        let written = if let Some(body) = path
            .strip_prefix("/bytes/")
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(|n| pattern.body(n))
        {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            match stream.write_all(head.as_bytes()).await {
                Ok(()) => stream.write_all(body).await,
                failed => failed,
            }
        } else {
            let wrong = checked
                .first_wrong
                .map_or_else(|| "-".to_owned(), |at| at.to_string());
            let body = format!("{} {wrong}", checked.len);
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).await
        };
        if written.is_err() || stream.flush().await.is_err() {
            return;
        }
    }
}
