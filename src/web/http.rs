//! One HTTP/1.1 exchange: the request read with `httparse` within fixed
//! bounds (head size, header count, body size, a Content-Length body
//! only), and the response written with the headers every answer carries.
//! One request per connection: the server answers and closes.

use std::io::{Read, Write};
use std::net::IpAddr;

/// The most a request's line and headers may take.
const MAX_HEAD: usize = 16 << 10;
const MAX_HEADERS: usize = 64;

/// A request, read whole.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub query: Vec<(String, String)>,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: IpAddr,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A comma-separated query parameter, as a list (empty when absent).
    pub fn query_list(&self, name: &str) -> Vec<String> {
        self.query(name)
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A cookie sent with the request.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}

/// A time parameter `name`: Unix seconds, or what `ysacct -S` takes
/// (read in `now`'s zone); a bad one is a 400 naming it.
pub fn time_param(
    name: &str,
    value: Option<&str>,
    now: &jiff::Zoned,
) -> Result<Option<i64>, Response> {
    value
        .map(|t| match t.parse::<i64>() {
            Ok(n) => Ok(n),
            Err(_) => crate::model::units::parse_time_filter(t, now.clone())
                .map_err(|e| Response::error(400, &format!("{name}: {e}"))),
        })
        .transpose()
}

/// Why no request could be read: answered with the status, or (`Closed`)
/// not at all.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed or stalled before sending a request.
    Closed,
    Refused(Response),
}

/// Reads one request from `stream`, taking a body of at most `max_body`.
pub fn read_request(
    stream: &mut impl Read,
    max_body: usize,
    peer: IpAddr,
) -> Result<Request, ReadError> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) | Err(_) if buffer.is_empty() => return Err(ReadError::Closed),
            Ok(0) => return Err(refuse(400, "the request ended before its headers did")),
            Err(_) => return Err(refuse(408, "the request was not sent in time")),
            Ok(n) => n,
        };
        buffer.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(&buffer) {
            Ok(httparse::Status::Complete(head)) if head > MAX_HEAD => {
                return Err(refuse(431, "the request's headers are too large"))
            }
            Ok(httparse::Status::Complete(head)) => {
                let request = head_of(&parsed, peer)?;
                let rest = buffer.split_off(head);
                return with_body(request, rest, stream, max_body);
            }
            Ok(httparse::Status::Partial) if buffer.len() > MAX_HEAD => {
                return Err(refuse(431, "the request's headers are too large"))
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => {
                return Err(refuse(431, "the request has too many headers"))
            }
            Err(e) => return Err(refuse(400, &format!("not an HTTP request: {e}"))),
        }
    }
}

fn refuse(status: u16, message: &str) -> ReadError {
    ReadError::Refused(Response::error(status, message))
}

/// The request line and headers, checked.
fn head_of(parsed: &httparse::Request, peer: IpAddr) -> Result<Request, ReadError> {
    let method = parsed.method.unwrap_or_default().to_string();
    let target = parsed.path.unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = Vec::with_capacity(parsed.headers.len());
    for h in parsed.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| refuse(400, &format!("header {} is not UTF-8", h.name)))?;
        headers.push((h.name.to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(Request {
        method,
        path: percent_decoded(path).ok_or_else(|| refuse(400, "the path is not UTF-8"))?,
        query: form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect(),
        headers,
        body: Vec::new(),
        peer,
    })
}

fn percent_decoded(path: &str) -> Option<String> {
    percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .ok()
        .map(|p| p.into_owned())
}

/// Reads the body the headers announce (Content-Length only).
fn with_body(
    mut request: Request,
    mut already: Vec<u8>,
    stream: &mut impl Read,
    max_body: usize,
) -> Result<Request, ReadError> {
    if request.header("transfer-encoding").is_some() {
        return Err(refuse(
            411,
            "send the body with a Content-Length, not a Transfer-Encoding",
        ));
    }
    // Two lengths: a proxy in front may have read the other one.
    if request
        .headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .count()
        > 1
    {
        return Err(refuse(400, "the request has more than one Content-Length"));
    }
    let length = match request.header("content-length") {
        None => 0,
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| refuse(400, &format!("Content-Length '{text}' is not a number")))?,
    };
    if length > max_body {
        return Err(refuse(
            413,
            &format!("the body is {length} bytes; at most {max_body} are taken"),
        ));
    }
    already.truncate(length);
    let mut rest = vec![0u8; length - already.len()];
    stream
        .read_exact(&mut rest)
        .map_err(|_| refuse(400, "the body is shorter than its Content-Length"))?;
    already.extend_from_slice(&rest);
    request.body = already;
    Ok(request)
}

/// An answer.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        let mut body = serde_json::to_vec(value).unwrap_or_default();
        body.push(b'\n');
        Response {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body,
        }
    }

    /// JSON already written.
    pub fn json_bytes(status: u16, body: Vec<u8>) -> Response {
        Response {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body,
        }
    }

    /// An error in slurmrestd's shape: `errors` with a description.
    pub fn error(status: u16, message: &str) -> Response {
        let value = serde_json::json!({
            "errors": [{ "description": message, "error_number": status, "error": reason(status), "source": "yswebd" }],
            "warnings": [],
        });
        Response::json(status, &value)
    }

    pub fn html(status: u16, body: String) -> Response {
        Response {
            status,
            content_type: "text/html; charset=utf-8",
            headers: Vec::new(),
            body: body.into_bytes(),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: String) -> Response {
        self.headers.push((name, value));
        self
    }

    /// Writes the response, with the headers every answer carries.
    pub fn write_to(
        &self,
        out: &mut impl Write,
        tls: bool,
        head_only: bool,
    ) -> std::io::Result<()> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        // A page may set a policy of its own instead of the default one.
        let own_policy = self
            .headers
            .iter()
            .any(|(n, _)| *n == "Content-Security-Policy");
        let defaults = SECURITY_HEADERS
            .iter()
            .filter(|(n, _)| !(own_policy && *n == "Content-Security-Policy"));
        for (name, value) in defaults.chain(
            self.headers
                .iter()
                .map(|(n, v)| (*n, v.as_str()))
                .collect::<Vec<_>>()
                .iter(),
        ) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if tls {
            head.push_str("Strict-Transport-Security: max-age=31536000\r\n");
        }
        head.push_str("\r\n");
        out.write_all(head.as_bytes())?;
        if !head_only {
            out.write_all(&self.body)?;
        }
        out.flush()
    }
}

/// Sent with every answer: no inline script or outside resource, no
/// framing, no sniffing, nothing cached, no referrer to other sites.
const SECURITY_HEADERS: [(&str, &str); 5] = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
];

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8], max_body: usize) -> Result<Request, ReadError> {
        read_request(&mut &bytes[..], max_body, IpAddr::from([127, 0, 0, 1]))
    }

    fn status(r: Result<Request, ReadError>) -> u16 {
        match r {
            Err(ReadError::Refused(response)) => response.status,
            Err(ReadError::Closed) => 0,
            Ok(_) => 200,
        }
    }

    #[test]
    fn reads_a_request_with_query_headers_and_body() {
        let raw = b"POST /slurm/v0.0.45/job/submit?a=1&b=x%20y HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nCookie: s=abc; t=1\r\n\r\nbody";
        let r = read(raw, 100).unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/slurm/v0.0.45/job/submit");
        assert_eq!(r.query("b"), Some("x y"));
        assert_eq!(r.header("host"), Some("h"));
        assert_eq!(r.cookie("s"), Some("abc"));
        assert_eq!(r.body, b"body");
    }

    #[test]
    fn refuses_what_is_out_of_bounds() {
        assert_eq!(
            status(read(b"GET / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 100)),
            413
        );
        assert_eq!(
            status(read(
                b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                100
            )),
            411
        );
        assert_eq!(
            status(read(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 100)),
            400
        );
        assert_eq!(status(read(b"\x00\x01garbage\r\n\r\n", 100)), 400);
        assert_eq!(status(read(b"", 100)), 0);
        let many: String = (0..100).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(
            status(read(
                format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes(),
                100
            )),
            431
        );
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD + 10));
        assert_eq!(status(read(long.as_bytes(), 100)), 431);
        // A head of 20,000 bytes that is whole by the read after the limit
        // is too large too.
        let padding = 20_000 - "GET / HTTP/1.1\r\nX-Big: \r\n\r\n".len();
        let whole = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "b".repeat(padding));
        assert_eq!(status(read(whole.as_bytes(), 100)), 431);
        assert_eq!(
            status(read(
                b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nhihello",
                100
            )),
            400
        );
        assert_eq!(
            status(read(
                b"GET / HTTP/1.1\r\nContent-Length: 10\r\n\r\nshort",
                100
            )),
            400
        );
    }

    #[test]
    fn every_answer_carries_the_security_headers() {
        let mut out = Vec::new();
        Response::error(404, "no such job")
            .write_to(&mut out, true, false)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"), "{text}");
        for needle in [
            "Content-Security-Policy: default-src 'none'",
            "X-Frame-Options: DENY",
            "Strict-Transport-Security",
            "\"description\":\"no such job\"",
        ] {
            assert!(text.contains(needle), "{needle} missing in {text}");
        }
    }
}
