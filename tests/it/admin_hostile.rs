//! The admin listener under hostile clients (issue 52, items 2 and 3): a slow client is cut
//! off, connections are capped, and requests that may touch the database are capped and
//! shed with `503`, while `/healthz` and `/metrics` still answer. The real service
//! (`Application` with the admin role) on a free port, spoken to over raw TCP where a
//! well-behaved HTTP client could not misbehave.

use std::net::SocketAddr;
use std::time::Duration;

use onecharge::http::{BODY_READ_TIMEOUT, HEADER_READ_TIMEOUT, MAX_IN_FLIGHT};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::support::api::AdminApi;
use crate::support::TestEnv;

/// The admin listener's address.
fn addr(api: &AdminApi) -> SocketAddr {
    api.url("")
        .trim_start_matches("http://")
        .parse()
        .expect("an address")
}

/// Whether the server closes `stream` within `within` (a read returns end of file or an
/// error), reading and dropping whatever it sends first.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buffer = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_trickles_its_headers_or_idles_is_cut_off() {
    let env = TestEnv::new().await;
    let api = AdminApi::start(&env.settings).await;
    let at = addr(&api);

    // Half a request's headers, never finished.
    let mut trickling = TcpStream::connect(at).await.unwrap();
    trickling
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // One whole request, then nothing on the kept-alive connection.
    let mut idle = TcpStream::connect(at).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 64];
    let read = idle.read(&mut answer).await.unwrap();
    assert!(
        answer[..read].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &answer[..read]
    );

    let deadline = HEADER_READ_TIMEOUT + Duration::from_secs(5);
    assert!(
        closed_within(&mut trickling, deadline).await,
        "a connection trickling its headers is closed"
    );
    assert!(
        closed_within(&mut idle, deadline).await,
        "an idle kept-alive connection is closed"
    );
    // and the listener still answers everyone else
    let response = api.http().get(api.url("/healthz")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    api.stop().await;
}

/// [`MAX_IN_FLIGHT`] requests whose bodies never finish arriving: each holds a permit of
/// the in-flight cap from when its headers are read until its body timeout.
async fn hold_every_permit(at: SocketAddr) -> Vec<TcpStream> {
    let mut slow = Vec::new();
    for _ in 0..MAX_IN_FLIGHT {
        let mut stream = TcpStream::connect(at).await.unwrap();
        stream
            .write_all(
                format!(
                    "POST /api/attempts/{}/resolve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"as\":",
                    uuid::Uuid::new_v4()
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        slow.push(stream);
    }
    slow
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_in_flight_cap_are_shed_and_probes_and_scrapes_still_answer() {
    // Open on loopback: a resolve needs no token, so its body is read by the handler.
    let env = TestEnv::new().await;
    let api = AdminApi::start(&env.settings).await;
    let at = addr(&api);

    let readyz = || async {
        tokio::time::timeout(
            Duration::from_secs(5),
            api.http().get(api.url("/readyz")).send(),
        )
        .await
        .expect("answered at once, not queued")
        .unwrap()
    };
    // The slow requests reach the cap as their headers are read: wait for it. On a loaded
    // machine the listener may take seconds to read them all, and the first may reach
    // their body timeout (and give their permits back) before the last is read: then the
    // permits are taken again, all at once.
    let mut slow = hold_every_permit(at).await;
    let mut shed = None;
    let deadline = tokio::time::Instant::now() + 6 * BODY_READ_TIMEOUT;
    let mut again_at = tokio::time::Instant::now() + BODY_READ_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        let response = readyz().await;
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            shed = Some(response);
            break;
        }
        if tokio::time::Instant::now() >= again_at {
            slow = hold_every_permit(at).await;
            again_at = tokio::time::Instant::now() + BODY_READ_TIMEOUT;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let shed = shed.expect("a request past the cap is shed with 503");
    assert_eq!(
        shed.headers()
            .get(reqwest::header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap()),
        Some("1")
    );
    for free in ["/healthz", "/metrics"] {
        let response = api.http().get(api.url(free)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{free} is never shed");
    }
    let metrics = api
        .http()
        .get(api.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let shed_count: f64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("onecharge_admin_requests_shed_total "))
        .expect("the shed counter")
        .parse()
        .unwrap();
    assert!(shed_count >= 1.0, "{shed_count}");

    // A body that trickles is cut off at the body timeout, and its permit comes back.
    for stream in &mut slow {
        assert!(
            closed_within(stream, BODY_READ_TIMEOUT + Duration::from_secs(5)).await,
            "a request whose body never arrives ends"
        );
    }
    assert_eq!(readyz().await.status(), StatusCode::OK);
    api.stop().await;
}
