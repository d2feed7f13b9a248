//! `health`: asks the Worker on this machine whether it is ready, for container health checks (the image has no
//! curl). One HTTP/1.0 request over a plain socket: nothing more is needed, and no HTTP client is linked for it.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use super::Exit;
use crate::settings::Http;

/// How long the Worker has to answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// `GET /readyz` on the Worker's own HTTP address (an unspecified address means this machine): 0 when it is
/// ready, 1 otherwise, and a line saying which.
pub fn health(http: &Http) -> Exit {
    if !http.enabled {
        say!("not ready: http.enabled is false, so there is nothing to ask; enable it for health checks");
        return Exit::Failure;
    }
    let mut address = http.address;
    if address.ip().is_unspecified() {
        address.set_ip(Ipv4Addr::LOCALHOST.into());
    }
    match readyz(address) {
        Ok(reply) if reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200") => {
            say!("ready");
            Exit::Success
        }
        Ok(reply) => {
            say!("not ready: {}", reply.lines().next().unwrap_or("no answer"));
            Exit::Failure
        }
        Err(e) => {
            say!("not ready: no Worker answers on {address} ({e})");
            Exit::Failure
        }
    }
}

/// The start of the answer to `GET /readyz` at `address`.
fn readyz(address: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&address, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut reply = String::new();
    stream.take(4096).read_to_string(&mut reply)?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    /// HTTP settings for a Worker at `address`, enabled or not.
    fn http(address: SocketAddr, enabled: bool) -> Http {
        Http { enabled, address, token: None, allowed_hosts: vec![] }
    }

    /// A server on a free local port that reads one request and answers `reply`; its address.
    fn answering(reply: &'static str) -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0; 1024];
            let _ = stream.read(&mut request).unwrap();
            stream.write_all(reply.as_bytes()).unwrap();
        });
        address
    }

    #[test]
    fn ready_only_when_the_worker_answers_200() {
        for reply in ["HTTP/1.1 200 OK\r\n\r\nready", "HTTP/1.0 200 OK\r\n\r\nready"] {
            assert_eq!(health(&http(answering(reply), true)), Exit::Success, "{reply}");
        }
        let busy = answering("HTTP/1.1 503 Service Unavailable\r\n\r\nthe database is unavailable");
        assert_eq!(health(&http(busy, true)), Exit::Failure);
        assert_eq!(readyz(answering("HTTP/1.1 503 x\r\n\r\nbody")).unwrap(), "HTTP/1.1 503 x\r\n\r\nbody");
    }

    #[test]
    fn a_worker_without_http_or_nobody_answering_is_not_ready() {
        let ready = answering("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(health(&http(ready, false)), Exit::Failure, "http is off");
        assert_eq!(health(&http(ready, true)), Exit::Success, "its one answer is still there: it was not asked");
        // Port 1: nothing listens there (a port freed for the test could be taken by another test meanwhile).
        assert_eq!(health(&http(SocketAddr::from((Ipv4Addr::LOCALHOST, 1)), true)), Exit::Failure);
    }
}
