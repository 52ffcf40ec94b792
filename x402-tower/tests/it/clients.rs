//! Payments shaped exactly as the official clients send them, signed with alloy's signer.
//!
//! `@x402/fetch` 2.x (v2): validAfter "0", validBefore now + maxTimeoutSeconds, keys in the order
//! x402Version, payload{authorization, signature}, resource, accepted. Legacy `x402` 1.x (v1): validAfter
//! now - 600, keys x402Version, scheme, network, payload{signature, authorization}. The Python client orders
//! keys differently again; the layer must not care.

use http::StatusCode;
use tower::Layer;

use crate::support::*;

fn auth_json(a: &Auth) -> String {
    format!(
        r#"{{"from":"{}","to":"{}","value":"{}","validAfter":"{}","validBefore":"{}","nonce":"{}"}}"#,
        a.from.to_checksum(None),
        a.to.to_checksum(None),
        a.value,
        a.valid_after,
        a.valid_before,
        a.nonce
    )
}

fn b64s(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

async fn pays(header: &str, value: &str) -> Answer {
    let inner = Inner::new();
    let svc = config()
        .build()
        .unwrap()
        .layer(inner.service(StatusCode::OK));
    // The client first gets the 402 and reads the requirements from it.
    let first = send(svc.clone(), req("/weather", &[])).await;
    assert_eq!(first.status, StatusCode::PAYMENT_REQUIRED);
    let a = send(svc, req("/weather", &[(header, value)])).await;
    assert_eq!(inner.calls(), usize::from(a.status == StatusCode::OK));
    a
}

#[tokio::test]
async fn typescript_v2_client() {
    let a = Auth {
        valid_after: 0,
        valid_before: now() + 300,
        ..Auth::v2(61)
    };
    let sig = a.sign(&signer(), &domain_base_sepolia());
    let json = format!(
        r#"{{"x402Version":2,"payload":{{"authorization":{},"signature":"{}"}},"resource":{{"url":"{}/weather","description":"A report","mimeType":"application/json"}},"accepted":{{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":300,"extra":{{"name":"USDC","version":"2"}}}}}}"#,
        auth_json(&a),
        sig,
        BASE_URL
    );
    let res = pays("payment-signature", &b64s(&json)).await;
    assert_eq!(res.status, StatusCode::OK, "{res:?}");
    assert!(res.receipt("payment-response").success);
}

#[tokio::test]
async fn legacy_v1_client() {
    let a = Auth {
        valid_after: now() - 600,
        valid_before: now() + 300,
        ..Auth::v1(62)
    };
    let sig = a.sign(&signer(), &domain_base_sepolia());
    let json = format!(
        r#"{{"x402Version":1,"scheme":"exact","network":"base-sepolia","payload":{{"signature":"{}","authorization":{}}}}}"#,
        sig,
        auth_json(&a)
    );
    let res = pays("x-payment", &b64s(&json)).await;
    assert_eq!(res.status, StatusCode::OK, "{res:?}");
    assert!(res.receipt("x-payment-response").success);
}

#[tokio::test]
async fn python_key_order_and_lowercase_addresses() {
    let a = Auth::v2(63);
    let sig = a.sign(&signer(), &domain_base_sepolia());
    let auth = auth_json(&a)
        .replace(
            &a.from.to_checksum(None),
            &a.from.to_string().to_lowercase(),
        )
        .replace(&a.to.to_checksum(None), &a.to.to_string().to_lowercase());
    assert!(auth.contains("validAfter") && !auth.contains("0xf39F"));
    let json = format!(
        r#"{{"accepted":{{"amount":"10000","asset":"0x036cbd53842c5426634e7929541ec2318f3dcf7e","extra":{{"name":"USDC","version":"2"}},"maxTimeoutSeconds":300,"network":"eip155:84532","payTo":"0x209693bc6afc0c5328ba36faf03c514ef312287c","scheme":"exact"}},"payload":{{"signature":"{sig}","authorization":{auth}}},"x402Version":2}}"#
    );
    let res = pays("payment-signature", &b64s(&json)).await;
    assert_eq!(res.status, StatusCode::OK, "{res:?}");
}
