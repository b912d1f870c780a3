//! Any input, however malformed: a request gets its lock or a 4xx with a problem+json body —
//! never a panic, never a handler run without its lock; any template text parses or is
//! refused with a reason; any detail renders as valid JSON.

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

use super::*;
use crate::Rejection;
use crate::key::KeyError;

/// `bytes` with every byte but the URI's unreserved ones written `%XX`: any byte string
/// (invalid UTF-8, `/`, `%`, `&`, spaces, controls) reaches the router as one path segment or
/// one query value.
fn percent_encoded(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// Bytes of a request part: mostly any bytes at all, often plain text (so that valid keys come
/// up as often as malformed ones).
fn part(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), len.clone()),
        vec(
            prop_oneof![b'a'..=b'z', Just(b'-'), Just(b'/'), Just(b' ')],
            len
        ),
    ]
}

/// The key the layer must lock for a request with these parts, or `None` when it must answer
/// 400: the query's value decoded (invalid UTF-8 replaced), the one header's value when it is
/// visible ASCII, the path's segment when it is UTF-8, and a key the locker accepts.
fn expected_key(
    id: &[u8],
    tenant_query: Option<&[u8]>,
    headers: &[http::HeaderValue],
) -> Option<String> {
    let query = String::from_utf8_lossy(tenant_query?);
    let [header] = headers else { return None };
    let header = header.to_str().ok()?;
    let id = std::str::from_utf8(id).ok()?;
    let key = format!("coupon:{query}:{header}:{id}");
    locker_accepts(&key).then_some(key)
}

/// Whether the locker takes `key` as it is: not empty, at most 256 bytes, no control
/// characters, no braces.
fn locker_accepts(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 256
        && !key.bytes().any(|byte| byte.is_ascii_control())
        && !key.contains(['{', '}'])
}

/// `/coupons/{id}` locked on `coupon:{query tenant}:{header x-tenant}:{path id}` through a
/// rejecting locker; its handler answers with its lock's name and whether the store saw the
/// lock free while the handler ran (it must not).
fn coupon_app() -> Router {
    let store = MemoryBackend::new();
    let probe = store.clone();
    let handler = move |Extension(lock): Extension<LockGuard>| async move {
        let free = is_free(&probe, lock.name()).await;
        format!("{} {free}", lock.name())
    };
    let key = KeyTemplate::parse("coupon:{query tenant}:{header x-tenant}:{path id}").unwrap();
    let locker = Locker::builder(store).reject().build().unwrap();
    Router::new()
        .route("/coupons/{id}", post(handler))
        .route_layer(LockLayer::new(locker, key))
}

/// Sends `request` to `app` on a runtime of its own (proptest's cases are not async).
fn answer(app: &Router, request: Request<Body>) -> Reply {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(send(app, request))
}

/// The answer is the handler's, holding the lock of `key`, or a 400 problem about the key.
fn locked_or_refused(reply: &Reply, key: Option<&str>) -> Result<(), TestCaseError> {
    if let Some(key) = key {
        prop_assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        prop_assert_eq!(&reply.body, &format!("lock:{key} false"));
        return Ok(());
    }
    prop_assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
    prop_assert_eq!(
        reply
            .headers
            .get("content-type")
            .map(|value| value.as_bytes()),
        Some(&b"application/problem+json"[..])
    );
    let problem: serde_json::Value = serde_json::from_str(&reply.body)
        .map_err(|error| TestCaseError::fail(format!("{error}: {}", reply.body)))?;
    prop_assert_eq!(&problem["type"], "urn:tower-lock:invalid-lock-key");
    prop_assert_eq!(&problem["status"], 400);
    prop_assert!(problem["detail"].is_string(), "{}", reply.body);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_template_text_parses_or_is_refused_with_a_reason(text in any::<String>()) {
        match KeyTemplate::parse(&text) {
            Ok(template) => {
                let (parts, ()) = Request::get("/?a=1").header("x-a", "1").body(()).unwrap().into_parts();
                let _key_or_error = crate::key::KeyExtractor::extract(&template, &parts);
            }
            Err(error) => prop_assert!(!error.to_string().is_empty()),
        }
    }

    #[test]
    fn any_request_gets_its_lock_or_a_400_problem(
        id in part(1..300),
        tenant_query in option::of(part(0..40)),
        tenant_headers in vec(part(0..40), 0..3),
    ) {
        let mut uri = format!("/coupons/{}", percent_encoded(&id));
        if let Some(tenant) = &tenant_query {
            uri.push_str(&format!("?other=1&tenant={}", percent_encoded(tenant)));
        }
        let headers: Vec<http::HeaderValue> = (tenant_headers.iter())
            .filter_map(|value| http::HeaderValue::from_bytes(value).ok())
            .collect();
        let mut request = Request::builder().method(Method::POST).uri(uri);
        for value in &headers {
            request = request.header("x-tenant", value);
        }
        let request = request.body(Body::empty()).expect("a valid request");
        let key = expected_key(&id, tenant_query.as_deref(), &headers);

        locked_or_refused(&answer(&coupon_app(), request), key.as_deref())?;
    }

    #[test]
    fn any_keys_a_closure_returns_are_locked_or_refused_with_a_400_problem(
        keys in vec(any::<String>(), 1..4),
    ) {
        let first = keys.iter().all(|key| locker_accepts(key)).then(|| keys.iter().min().cloned()).flatten();
        let store = MemoryBackend::new();
        let probe = store.clone();
        let handler = move |Extension(lock): Extension<LockGuard>| async move {
            let free = is_free(&probe, lock.name()).await;
            format!("{} {free}", lock.name())
        };
        let locker = Locker::builder(store).reject().build().unwrap();
        let app = Router::new()
            .route("/", post(handler))
            .route_layer(LockLayer::new(locker, many(move |_| Ok(keys.clone()))));

        let reply = answer(&app, request(Method::POST, "/"));

        locked_or_refused(&reply, first.as_deref())?;
    }

    #[test]
    fn any_detail_renders_as_a_json_problem(detail in any::<String>()) {
        let response = Rejection::from(KeyError::invalid(detail.clone())).into_response();

        prop_assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let problem: serde_json::Value = serde_json::from_str(response.body())
            .map_err(|error| TestCaseError::fail(error.to_string()))?;
        prop_assert_eq!(&problem["detail"], &serde_json::Value::String(detail));
    }
}
