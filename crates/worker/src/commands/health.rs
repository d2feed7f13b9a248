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
        println!("not ready: http.enabled is false, so there is nothing to ask; enable it for health checks");
        return Exit::Failure;
    }
    let mut address = http.address;
    if address.ip().is_unspecified() {
        address.set_ip(Ipv4Addr::LOCALHOST.into());
    }
    match readyz(address) {
        Ok(reply) if reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200") => {
            println!("ready");
            Exit::Success
        }
        Ok(reply) => {
            println!("not ready: {}", reply.lines().next().unwrap_or("no answer"));
            Exit::Failure
        }
        Err(e) => {
            println!("not ready: no Worker answers on {address} ({e})");
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
