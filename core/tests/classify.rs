//! The error classification of every provider, from the whole answer
//! (`proxy_core::classify`): GCE's real bodies and operations
//! (`proxy_core::testing::gce`), libvirt's error numbers, and the Kubernetes API's statuses.

use std::time::Duration;

use proxy_core::classify::{GceAnswer, KubeAnswer, LibvirtAnswer};
use proxy_core::testing::gce::{
    CALL_ANSWERS, OPERATION_ANSWERS, assert_classified, assert_rate_limit,
};
use proxy_core::{Cause, ErrorClass};

#[test]
fn every_gce_call_answer_gets_its_class_and_names_what_to_fix() {
    for answer in CALL_ANSWERS {
        let got = GceAnswer::from_body(answer.http_status, answer.body.as_bytes()).classify();
        assert_classified(answer.name, answer.class, answer.leads_with, &got);
        assert!(
            got.message
                .contains(&format!("HTTP {}", answer.http_status))
                || got.message.starts_with("spec.cloudInit"),
            "{}: the status is said: {:?}",
            answer.name,
            got.message
        );
    }
}

#[test]
fn every_gce_operation_error_gets_its_class() {
    for answer in OPERATION_ANSWERS {
        let operation: serde_json::Value = serde_json::from_str(answer.body).unwrap();
        let got = GceAnswer::from_operation(&operation).classify();
        assert_classified(answer.name, answer.class, answer.leads_with, &got);
        assert_eq!(got.zone.as_deref(), answer.zone, "{}", answer.name);
    }
}

#[test]
fn a_rate_limit_is_transient_whichever_part_of_the_answer_says_it() {
    // The same 403 said three ways: the old classification read only `errors[]`, and the
    // client keeps only `details[]` when a body has both.
    for reasons in [
        vec!["rateLimitExceeded".to_owned()],
        vec!["RATE_LIMIT_EXCEEDED".to_owned()],
        vec![
            "rateLimitExceeded".to_owned(),
            "RATE_LIMIT_EXCEEDED".to_owned(),
        ],
    ] {
        let answer = GceAnswer {
            http_status: Some(403),
            status: Some("PERMISSION_DENIED".to_owned()),
            reasons: reasons.clone(),
            message: "Quota exceeded for quota metric 'Queries'".to_owned(),
            retry_after: None,
        };
        let got = answer.classify();
        assert_eq!(got.class, ErrorClass::Transient, "{reasons:?}");
        assert!(got.is_rate_limit(), "{reasons:?}: {got:?}");
    }
}

#[test]
fn a_rate_limit_of_the_project_is_the_whole_providers_and_carries_the_wait_it_names() {
    // GCE counts its rate quotas per project and per minute: every answer of the table that
    // says "rate-limited" is about every call of the provider.
    for answer in CALL_ANSWERS {
        let got = GceAnswer::from_body(answer.http_status, answer.body.as_bytes()).classify();
        assert_rate_limit(answer, &got);
    }
    // Too many operations on one VM is about that VM: transient, not the provider's.
    for answer in OPERATION_ANSWERS {
        let operation: serde_json::Value = serde_json::from_str(answer.body).unwrap();
        let got = GceAnswer::from_operation(&operation).classify();
        assert!(!got.is_rate_limit(), "{}: {got:?}", answer.name);
    }
}

#[test]
fn a_protobuf_duration_is_read_as_it_is_written() {
    let cases = [
        ("23s", Some(Duration::from_secs(23))),
        ("1.500s", Some(Duration::from_millis(1_500))),
        ("0s", Some(Duration::ZERO)),
        ("23", None),
        ("-1s", None),
        ("soon", None),
    ];
    for (text, want) in cases {
        assert_eq!(proxy_core::classify::proto_duration(text), want, "{text:?}");
    }
}

#[test]
fn user_data_is_never_quoted_back() {
    let refused = CALL_ANSWERS
        .iter()
        .find(|a| a.body.contains("resource.metadata"))
        .unwrap();
    let got = GceAnswer::from_body(refused.http_status, refused.body.as_bytes()).classify();
    assert!(!got.message.contains("hunter2"), "{got:?}");
}

#[test]
fn no_answer_at_all_is_transient_and_says_the_provider_is_unreachable() {
    let got = GceAnswer::none("connection refused").classify();
    assert_eq!(got.class, ErrorClass::Transient);
    assert_eq!(got.cause, Some(Cause::Unreachable), "{got:?}");
    assert!(got.message.contains("connection refused"), "{got:?}");
}

#[test]
fn an_unbounded_html_answer_is_cut_short() {
    let page = format!("<html>{}</html>", "x".repeat(10_000));
    let got = GceAnswer::from_body(502, page.as_bytes()).classify();
    assert_eq!(got.class, ErrorClass::Transient);
    assert!(got.message.len() < 400, "{} bytes", got.message.len());
}

#[test]
fn libvirt_errors_are_classified_by_number() {
    let cases = [
        // (virErrorNumber, what it is, class)
        (45, "VIR_ERR_AUTH_FAILED", ErrorClass::Refused),
        (88, "VIR_ERR_ACCESS_DENIED", ErrorClass::Refused),
        (49, "VIR_ERR_NO_STORAGE_POOL", ErrorClass::Refused),
        (43, "VIR_ERR_NO_NETWORK", ErrorClass::Refused),
        (2, "VIR_ERR_NO_MEMORY", ErrorClass::Stockout),
        (27, "VIR_ERR_XML_ERROR", ErrorClass::Permanent),
        (91, "VIR_ERR_CPU_INCOMPATIBLE", ErrorClass::Permanent),
        (55, "VIR_ERR_OPERATION_INVALID", ErrorClass::Transient),
        (87, "VIR_ERR_RESOURCE_BUSY", ErrorClass::Transient),
        (38, "VIR_ERR_SYSTEM_ERROR", ErrorClass::Transient),
        (39, "VIR_ERR_RPC", ErrorClass::Transient),
        (1, "VIR_ERR_INTERNAL_ERROR", ErrorClass::Transient),
        (
            999,
            "a number this build does not know",
            ErrorClass::Transient,
        ),
    ];
    for (code, name, class) in cases {
        let got = LibvirtAnswer {
            code,
            message: format!("{name} happened"),
            host: "lab-1".to_owned(),
            what: "start domain".to_owned(),
        }
        .classify();
        assert_eq!(got.class, class, "{name}: {got:?}");
        assert!(
            got.message.starts_with("host lab-1: start domain: ")
                || got.message.starts_with("spec.placement: "),
            "{got:?}"
        );
    }
    let out = LibvirtAnswer {
        code: 2,
        message: "cannot allocate memory".to_owned(),
        host: "lab-1".to_owned(),
        what: "start domain".to_owned(),
    }
    .classify();
    assert_eq!(
        out.zone.as_deref(),
        Some("lab-1"),
        "a full host is a zone out of capacity"
    );
}

#[test]
fn kubernetes_statuses_are_classified_by_code_reason_and_message() {
    let rbac = "pods is forbidden: User \"system:serviceaccount:proxy-operator:proxy-operator\" \
                cannot create resource \"pods\" in API group \"\" in the namespace \"crawl\"";
    let cases = [
        (
            Some(403),
            "Forbidden",
            "pods \"proxy-x\" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=10, limited: pods=10",
            ErrorClass::Quota,
        ),
        (Some(403), "Forbidden", rbac, ErrorClass::Refused),
        (
            Some(401),
            "Unauthorized",
            "Unauthorized",
            ErrorClass::Refused,
        ),
        (
            Some(403),
            "Forbidden",
            "pods \"proxy-x\" is forbidden: unable to create new content in namespace crawl because it is being terminated",
            ErrorClass::Transient,
        ),
        (
            Some(403),
            "Forbidden",
            "admission webhook \"policy.example.com\" denied the request: hostNetwork is not allowed",
            ErrorClass::Permanent,
        ),
        // "cannot" alone is no RBAC refusal: RBAC names the user it refuses.
        (
            Some(403),
            "Forbidden",
            "admission webhook \"policy.example.com\" denied the request: a Pod cannot use hostNetwork",
            ErrorClass::Permanent,
        ),
        (
            Some(422),
            "Invalid",
            "Pod \"proxy-x\" is invalid: spec.containers[0].ports[0].containerPort: Invalid value: 70000",
            ErrorClass::Permanent,
        ),
        (
            Some(400),
            "BadRequest",
            "bad request",
            ErrorClass::Permanent,
        ),
        (
            Some(429),
            "TooManyRequests",
            "too many requests, please try again later",
            ErrorClass::Transient,
        ),
        (
            Some(409),
            "Conflict",
            "the object has been modified",
            ErrorClass::Transient,
        ),
        (
            Some(504),
            "Timeout",
            "Timeout: request did not complete within the allotted timeout",
            ErrorClass::Transient,
        ),
        (
            Some(500),
            "InternalError",
            "etcdserver: leader changed",
            ErrorClass::Transient,
        ),
        (None, "", "connection refused", ErrorClass::Transient),
    ];
    for (code, reason, message, class) in cases {
        let got = KubeAnswer {
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
            retry_after: None,
        }
        .classify();
        assert_eq!(got.class, class, "{code:?} {reason}: {got:?}");
        let cause = match code {
            Some(429) => Some(Cause::RateLimited { retry_after: None }),
            None => Some(Cause::Unreachable),
            Some(_) => None,
        };
        assert_eq!(got.cause, cause, "{code:?} {reason}");
    }
    let paced = KubeAnswer {
        code: Some(429),
        reason: "TooManyRequests".to_owned(),
        message: "too many requests, please try again later".to_owned(),
        retry_after: Some(Duration::from_secs(1)),
    }
    .classify();
    assert_eq!(paced.retry_after(), Some(Duration::from_secs(1)));
}

/// A stockout is known by its reason or by its words alone: the reason a call answers with
/// varies where an operation's does not, and the words of an operation vary too.
#[test]
fn a_stockout_is_known_by_its_reason_or_by_its_words_alone() {
    let by_words = GceAnswer {
        http_status: Some(503),
        status: None,
        reasons: vec!["resourcePoolExhausted".to_owned()],
        message: "The zone 'projects/p/zones/europe-west1-b' does not have enough resources \
                  available to fulfill the request."
            .to_owned(),
        retry_after: None,
    };
    let by_reason = GceAnswer {
        http_status: Some(503),
        status: None,
        reasons: vec!["ZONE_RESOURCE_POOL_EXHAUSTED".to_owned()],
        message: "Try a different zone, or try again later.".to_owned(),
        retry_after: None,
    };
    for answer in [by_words, by_reason] {
        assert_eq!(answer.classify().class, ErrorClass::Stockout, "{answer:?}");
    }
}

/// Only a 404 naming a zone itself (`projects/p/zones/z`) blames `spec.placement.zone`, and
/// only one naming the project itself (`projects/p`) the providers config: one naming
/// something in them (the instance the call was about) or a region blames neither.
#[test]
fn a_404_blames_the_zone_or_the_project_only_when_it_names_it_itself() {
    let not_found = |path: &str| GceAnswer {
        http_status: Some(404),
        status: None,
        reasons: vec!["notFound".to_owned()],
        message: format!("The resource '{path}' was not found"),
        retry_after: None,
    };
    let zone = not_found("projects/p/zones/europe-west9-z").classify();
    assert_eq!(zone.class, ErrorClass::Permanent, "{zone:?}");
    assert!(
        zone.message.starts_with("spec.placement.zone: "),
        "{zone:?}"
    );
    let project = not_found("projects/p").classify();
    assert_eq!(project.class, ErrorClass::Refused, "{project:?}");
    assert!(
        project
            .message
            .starts_with("the providers config's gcp.project: "),
        "{project:?}"
    );
    for path in [
        "projects/p/zones/europe-west1-b/instances/px-4c1d",
        "projects/p/regions/europe-west1",
    ] {
        let got = not_found(path).classify();
        assert_eq!(got.class, ErrorClass::Transient, "{path}: {got:?}");
        assert!(got.message.starts_with("The resource"), "{path}: {got:?}");
    }
}

/// What a Proxy shows of a GCE answer: its message, then the HTTP status, the `status` and
/// every reason once, in the answer's order.
#[test]
fn a_gce_answer_is_described_with_its_status_and_each_reason_once() {
    let answer = GceAnswer {
        http_status: Some(403),
        status: Some("PERMISSION_DENIED".to_owned()),
        reasons: vec![
            "forbidden".to_owned(),
            "PERMISSION_DENIED".to_owned(),
            "IAM_PERMISSION_DENIED".to_owned(),
            "forbidden".to_owned(),
        ],
        message: "Required 'compute.instances.create' permission".to_owned(),
        retry_after: None,
    };
    assert_eq!(
        answer.classify().message,
        "the compute API refused the operator: Required 'compute.instances.create' permission \
         (HTTP 403, PERMISSION_DENIED, forbidden, IAM_PERMISSION_DENIED)"
    );
}

/// A provider error reads as its class and message, and is a `std::error::Error`.
#[test]
fn a_provider_error_is_an_error_that_says_its_class() {
    let error = proxy_core::ProviderError::refused("401 UNAUTHENTICATED");
    assert_eq!(error.to_string(), "refused: 401 UNAUTHENTICATED");
    let boxed: Box<dyn std::error::Error> = Box::new(error);
    assert_eq!(boxed.to_string(), "refused: 401 UNAUTHENTICATED");
}
