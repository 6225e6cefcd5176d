//! Tests of `Coded`: framework statuses get a Concord code in headers and trailers,
//! coded and OK statuses pass unchanged, and a passed deadline answers TIMEOUT.

use std::collections::VecDeque;

use http_body::Body as _;
use tonic::Code;
use tonic_types::StatusExt;
use tower_service::Service;

use super::*;

/// A service answering each call with the next canned response, or never.
#[derive(Clone, Default)]
struct Canned {
    responses: std::sync::Arc<std::sync::Mutex<VecDeque<http::Response<Body>>>>,
}

impl Canned {
    fn answering(response: http::Response<Body>) -> Self {
        let canned = Canned::default();
        canned.responses.lock().unwrap().push_back(response);
        canned
    }
}

impl tower_service::Service<http::Request<Body>> for Canned {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<Body>) -> Self::Future {
        let next = self.responses.lock().unwrap().pop_front();
        Box::pin(async move {
            match next {
                Some(response) => Ok(response),
                None => std::future::pending().await,
            }
        })
    }
}

/// A body that sends `trailers` and ends.
struct TrailersBody(Option<HeaderMap>);

impl http_body::Body for TrailersBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        Poll::Ready(self.0.take().map(|t| Ok(Frame::trailers(t))))
    }
}

fn request(timeout: Option<&str>) -> http::Request<Body> {
    let mut request = http::Request::new(Body::empty());
    *request.uri_mut() = "/concord.v1.Tree/Get".parse().unwrap();
    if let Some(t) = timeout {
        request
            .headers_mut()
            .insert(GRPC_TIMEOUT, t.parse().unwrap());
    }
    request
}

/// The status a response or trailers carry, as a client reads it.
fn status_of(headers: &HeaderMap) -> Status {
    Status::from_header_map(headers).unwrap()
}

fn concord_code(s: &Status) -> String {
    s.metadata()
        .get(ERROR_CODE_HEADER)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Code in all three carriers, the same each time.
fn assert_coded(s: &Status, code: &str) {
    assert_eq!(concord_code(s), code, "{s:?}");
    assert!(s.message().starts_with(&format!("{code}: ")), "{s:?}");
    let info = s.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.reason, code);
}

async fn call(service: Canned, timeout: Option<&str>) -> http::Response<Body> {
    let mut coded = Coded::new(service);
    match coded.call(request(timeout)).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

async fn trailers_of(response: http::Response<Body>) -> HeaderMap {
    let mut body = response.into_body();
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            Some(Ok(frame)) => {
                if let Ok(trailers) = frame.into_trailers() {
                    return trailers;
                }
            }
            other => panic!("no trailers: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_decode_error_in_the_headers_gets_bad_message() {
    let raised = Status::internal("failed to decode Protobuf message: invalid wire type");
    let response = call(Canned::answering(status_response(raised)), None).await;
    let s = status_of(response.headers());
    assert_eq!(s.code(), Code::InvalidArgument);
    assert_coded(&s, "BAD_MESSAGE");
    assert!(s.message().contains("/concord.v1.Tree/Get"), "{s:?}");
    assert!(s.message().contains("invalid wire type"), "{s:?}");
}

#[tokio::test]
async fn a_request_too_large_gets_message_too_large() {
    let raised = Status::out_of_range(
        "Error, decoded message length too large: found 5242885 bytes, the limit is: 4194304 bytes",
    );
    let response = call(Canned::answering(status_response(raised)), None).await;
    let s = status_of(response.headers());
    assert_eq!(s.code(), Code::ResourceExhausted);
    assert_coded(&s, "MESSAGE_TOO_LARGE");
    assert!(s.message().contains("4194304"), "{s:?}");
}

#[tokio::test]
async fn an_unknown_method_gets_unimplemented() {
    // What tonic's generated code answers for a method it does not have.
    let mut response = http::Response::new(Body::default());
    response
        .headers_mut()
        .insert(GRPC_STATUS, (Code::Unimplemented as i32).into());
    let response = call(Canned::answering(response), None).await;
    let s = status_of(response.headers());
    assert_eq!(s.code(), Code::Unimplemented);
    assert_coded(&s, "UNIMPLEMENTED");
    assert!(s.message().contains("/concord.v1.Tree/Get"), "{s:?}");
}

#[tokio::test]
async fn a_response_too_large_in_the_trailers_gets_response_too_large() {
    let raised = Status::out_of_range(
        "Error, encoded message length too large: found 9000000 bytes, the limit is: 5242880 bytes",
    );
    let mut trailers = HeaderMap::new();
    raised.add_header(&mut trailers).unwrap();
    let response = http::Response::new(Body::new(TrailersBody(Some(trailers))));
    let response = call(Canned::answering(response), None).await;
    let s = status_of(&trailers_of(response).await);
    assert_eq!(s.code(), Code::ResourceExhausted);
    assert_coded(&s, "RESPONSE_TOO_LARGE");
    assert!(s.message().contains("page_size"), "{s:?}");
}

#[tokio::test]
async fn coded_and_ok_statuses_pass_unchanged() {
    let coded = error(ErrorCode::NoNode, "/a does not exist");
    let response = call(Canned::answering(status_response(coded.clone())), None).await;
    let s = status_of(response.headers());
    assert_eq!(s.message(), coded.message());
    assert_eq!(s.details(), coded.details());

    let mut ok = HeaderMap::new();
    ok.insert(GRPC_STATUS, "0".parse().unwrap());
    let response = http::Response::new(Body::new(TrailersBody(Some(ok.clone()))));
    let response = call(Canned::answering(response), None).await;
    assert_eq!(trailers_of(response).await, ok);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_passing_in_the_server_answers_timeout() {
    let started = tokio::time::Instant::now();
    let response = call(Canned::default(), Some("300m")).await;
    let waited = started.elapsed();
    // A tenth early, so the answer reaches the client before its own timer fires.
    assert!(
        waited < Duration::from_millis(300) && waited >= Duration::from_millis(270),
        "{waited:?}"
    );
    let s = status_of(response.headers());
    assert_eq!(s.code(), Code::DeadlineExceeded);
    assert_coded(&s, "TIMEOUT");
    assert!(s.message().contains("300 ms"), "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn an_answer_before_the_deadline_is_kept() {
    let response = call(
        Canned::answering(http::Response::new(Body::empty())),
        Some("1S"),
    )
    .await;
    assert!(response.headers().get(GRPC_STATUS).is_none());
}

#[test]
fn the_margin_is_a_tenth_within_bounds() {
    let ms = Duration::from_millis;
    assert_eq!(deadline_margin(ms(1)), Duration::from_micros(500));
    assert_eq!(deadline_margin(ms(10)), ms(2));
    assert_eq!(deadline_margin(ms(300)), ms(30));
    assert_eq!(deadline_margin(ms(60_000)), ms(200));
    assert_eq!(deadline_margin(Duration::ZERO), Duration::ZERO);
}

#[test]
fn grpc_timeout_parses_as_the_protocol_writes_it() {
    let p = |s: &str| parse_grpc_timeout(s.as_bytes());
    assert_eq!(p("1H"), Some(Duration::from_secs(3600)));
    assert_eq!(p("2M"), Some(Duration::from_secs(120)));
    assert_eq!(p("3S"), Some(Duration::from_secs(3)));
    assert_eq!(p("300m"), Some(Duration::from_millis(300)));
    assert_eq!(p("99999999u"), Some(Duration::from_micros(99_999_999)));
    assert_eq!(p("5n"), Some(Duration::from_nanos(5)));
    for bad in ["", "m", "123456789m", "12x", "-1m", "1.5S", "١m"] {
        assert_eq!(p(bad), None, "{bad:?}");
    }
}
