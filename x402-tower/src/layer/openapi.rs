//! OpenAPI descriptions of x402 for services that document themselves with [`utoipa`] (feature `openapi`).
//!
//! The wire types of [`crate::proto`] derive [`utoipa::ToSchema`] under this feature (amounts, addresses and
//! nonces as the strings they are on the wire, with their patterns). This module adds what a paid
//! operation's documentation needs around them:
//!
//! - [`PaymentRequired`]: the `402` response, with `PAYMENT-REQUIRED` (Base64 of the v2 document) as a string
//!   header and the v1 JSON body;
//! - [`PaymentHeaders`]: the request headers a client pays with (`PAYMENT-SIGNATURE`, `X-PAYMENT`), as strings;
//! - [`PaymentResponseHeaders`]: the settlement receipt headers of the paid `200`;
//! - [`X402Schemas`]: registers the schemas these refer to.
//!
//! ```
//! use utoipa::OpenApi;
//! use x402_tower::layer::openapi::{PaymentHeaders, PaymentRequired, X402Schemas};
//!
//! /// A paid weather report.
//! #[utoipa::path(
//!     get,
//!     path = "/weather",
//!     params(PaymentHeaders),
//!     responses((status = 200, description = "The report", body = String), PaymentRequired),
//! )]
//! #[allow(dead_code)]
//! async fn weather() {}
//!
//! #[derive(OpenApi)]
//! #[openapi(paths(weather), modifiers(&X402Schemas))]
//! struct Doc;
//!
//! let doc = serde_json::to_value(Doc::openapi()).unwrap();
//! let r402 = &doc["paths"]["/weather"]["get"]["responses"]["402"];
//! assert_eq!(r402["headers"]["PAYMENT-REQUIRED"]["schema"]["type"], "string");
//! assert!(doc["components"]["schemas"]["PaymentRequirementsV1"].is_object());
//! ```

use std::collections::BTreeMap;

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{
    ContentBuilder, Ref, RefOr, Required, Response, ResponseBuilder, ResponsesBuilder, Type,
    schema::ObjectBuilder,
};
use utoipa::{IntoParams, IntoResponses, Modify, PartialSchema, ToSchema};

use crate::proto::{PaymentRequiredV1, PaymentRequiredV2, SettleResponse};

fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

/// The `402 Payment Required` response of a paid operation.
///
/// Headers: `PAYMENT-REQUIRED` (x402 v2: Base64 of the JSON [`PaymentRequiredV2`]); body: the x402 v1
/// [`PaymentRequiredV1`] JSON, whose `error` says why the payment is required or what was wrong with the
/// one sent. Registers both documents' schemas.
#[derive(Debug)]
pub struct PaymentRequired;

impl IntoResponses for PaymentRequired {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let response = ResponseBuilder::new()
            .description(
                "Payment required, or the payment sent was refused (the body's `error` says why). The \
                 offers are in the body (x402 v1) and, Base64-encoded, in `PAYMENT-REQUIRED` (x402 v2).",
            )
            .header(
                "PAYMENT-REQUIRED",
                HeaderBuilder::new()
                    .schema(Some(string()))
                    .description(Some(
                        "x402 v2: Base64 of the JSON PaymentRequiredV2 document (see its schema).",
                    ))
                    .build(),
            )
            .header(
                "X-Payment-Required",
                HeaderBuilder::new()
                    .schema(Some(string()))
                    .description(Some(
                        "When the layer sends it (`X402Config::x_payment_required`): Base64 of the same \
                         document without its `extensions`.",
                    ))
                    .build(),
            )
            .header(
                "Cache-Control",
                HeaderBuilder::new()
                    .schema(Some(string().enum_values(Some(["no-store"]))))
                    .build(),
            )
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name(PaymentRequiredV1::name())))
                    .build(),
            )
            .content(
                "text/html",
                ContentBuilder::new()
                    .schema(Some(string().description(Some(
                        "A paywall page, for a request whose Accept prefers text/html (a browser).",
                    ))))
                    .build(),
            )
            .build();
        ResponsesBuilder::new()
            .response("402", response)
            .build()
            .into()
    }
}

/// A [`utoipa::Modify`] that registers the schemas [`PaymentRequired`] and the payment headers refer to
/// (`PaymentRequiredV1`, `PaymentRequiredV2`, `SettleResponse` and what they contain):
/// `#[openapi(modifiers(&X402Schemas))]`.
#[derive(Debug)]
pub struct X402Schemas;

impl Modify for X402Schemas {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let mut out = Vec::new();
        PaymentRequiredV1::schemas(&mut out);
        out.push((
            PaymentRequiredV1::name().into_owned(),
            PaymentRequiredV1::schema(),
        ));
        PaymentRequiredV2::schemas(&mut out);
        out.push((
            PaymentRequiredV2::name().into_owned(),
            PaymentRequiredV2::schema(),
        ));
        SettleResponse::schemas(&mut out);
        out.push((
            SettleResponse::name().into_owned(),
            SettleResponse::schema(),
        ));
        let components = openapi.components.get_or_insert_with(Default::default);
        components.schemas.extend(out);
    }
}

/// The request headers a client pays with, as header parameters (both optional: absent, the answer is 402).
#[derive(Debug)]
pub struct PaymentHeaders;

impl IntoParams for PaymentHeaders {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let header = |name: &str, description: &str| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(description))
                .schema(Some(string()))
                .build()
        };
        vec![
            header(
                "PAYMENT-SIGNATURE",
                "x402 v2: Base64 of the JSON PaymentPayloadV2 (a signed EIP-3009 authorization).",
            ),
            header(
                "X-PAYMENT",
                "x402 v1: Base64 of the JSON PaymentPayloadV1 (a signed EIP-3009 authorization).",
            ),
        ]
    }
}

/// The settlement receipt headers of a paid answer, to add to its `200` response.
#[derive(Debug)]
pub struct PaymentResponseHeaders;

impl PaymentResponseHeaders {
    /// `(name, header)` pairs: `PAYMENT-RESPONSE` (v2) and `X-PAYMENT-RESPONSE` (v1), each Base64 of the JSON
    /// [`SettleResponse`].
    pub fn headers() -> Vec<(&'static str, utoipa::openapi::header::Header)> {
        let h = |d: &str| {
            HeaderBuilder::new()
                .schema(Some(string()))
                .description(Some(d))
                .build()
        };
        vec![
            (
                "PAYMENT-RESPONSE",
                h("x402 v2 (when paid with PAYMENT-SIGNATURE): Base64 of the JSON SettleResponse."),
            ),
            (
                "X-PAYMENT-RESPONSE",
                h("x402 v1 (when paid with X-PAYMENT): Base64 of the JSON SettleResponse."),
            ),
        ]
    }
}
