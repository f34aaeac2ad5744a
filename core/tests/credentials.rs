//! Credentials per proxy: when `decide` issues and revokes the credentials Secret, one test
//! per row of the table. A proxy without credentials (External, a VM booting its own
//! cloud-init, a recording from before credentials) gets none of these actions: the rows of
//! `table.rs` are that case.

mod support;

use proxy_core::naming::credentials_secret_name;
use proxy_core::testing::{UID, external_spec, managed_spec};
use proxy_core::{Action, InstanceView, MetadataWrite, Observed, ProviderRequest, decide};
use proxy_crd::ProxyStatus;
use support::{creating_status, deleting_status, replacing_status, running_status};

const SECRET: &str = "proxy-kbqzhquppopaia3n-credentials";

fn issue() -> MetadataWrite {
    MetadataWrite::IssueCredentials {
        secret: SECRET.to_owned(),
    }
}

fn revoke() -> MetadataWrite {
    MetadataWrite::RevokeCredentials {
        secret: SECRET.to_owned(),
    }
}

#[test]
fn the_secret_is_named_after_the_proxys_uid() {
    assert_eq!(credentials_secret_name(UID), SECRET);
}

#[test]
fn a_create_issues_the_credentials_first_and_names_them_in_the_request() {
    // (The annotation names this spec already, so the hash is not written again.)
    let observed = Observed::test()
        .with_credentials()
        .annotated(proxy_core::testing::hash());
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(decision.metadata(), [issue()]);
    let Some(ProviderRequest::Create(request)) = decision.provider_call() else {
        panic!("no create: {:?}", decision.actions());
    };
    assert_eq!(request.credentials_secret.as_deref(), Some(SECRET));
    // The recorded form: the Secret's name only, before the create.
    let actions = decision.actions();
    assert_eq!(
        actions[0],
        Action::IssueCredentials {
            secret: SECRET.to_owned()
        }
    );
    assert!(matches!(actions[1], Action::Create(_)), "{actions:?}");
}

#[test]
fn a_retried_create_issues_again_which_keeps_the_secret_of_the_first_attempt() {
    // A create that failed (or whose providerID was lost) leaves the Secret in place; the
    // retry asks for it again and the shell keeps the existing one.
    let decision = decide(
        &managed_spec(),
        &creating_status(),
        &Observed::test()
            .with_credentials()
            .annotated(proxy_core::testing::hash()),
    );
    assert_eq!(decision.metadata(), [issue()]);
}

#[test]
fn without_credentials_a_create_issues_none() {
    let observed = Observed::test().annotated(proxy_core::testing::hash());
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(decision.metadata(), []);
    let Some(ProviderRequest::Create(request)) = decision.provider_call() else {
        panic!("no create");
    };
    assert_eq!(request.credentials_secret, None);
}

#[test]
fn a_create_held_for_a_down_provider_issues_nothing() {
    let observed = Observed::test()
        .with_credentials()
        .provider_down("the provider's last check failed");
    let decision = decide(&managed_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(decision.metadata(), []);
    assert_eq!(decision.provider_call(), None);
}

#[test]
fn an_instance_found_gone_revokes_its_credentials() {
    let observed = Observed::test()
        .with_credentials()
        .annotated(proxy_core::testing::hash())
        .instance(InstanceView::NotFound);
    let decision = decide(&managed_spec(), &running_status(), &observed);
    assert_eq!(decision.metadata(), [revoke()]);
    assert_eq!(decision.status().provider_id, None);
}

#[test]
fn a_replacement_revokes_once_the_old_instance_is_gone_and_the_next_create_issues_anew() {
    let observed = Observed::test()
        .with_credentials()
        .annotated("an-older-hash");
    // While the old instance runs: delete it, keep its credentials (it still serves).
    let deleting = decide(
        &managed_spec(),
        &replacing_status(),
        &observed.clone().instance(InstanceView::Running {
            ip: "10.0.0.7".into(),
        }),
    );
    assert_eq!(deleting.metadata(), []);
    assert!(matches!(
        deleting.provider_call(),
        Some(ProviderRequest::Delete { .. })
    ));
    // Gone: revoke.
    let gone = decide(
        &managed_spec(),
        &replacing_status(),
        &observed.clone().instance(InstanceView::NotFound),
    );
    assert_eq!(gone.metadata(), [revoke()]);
    // Next pass: the new spec's hash, new credentials, then create.
    let next = decide(&managed_spec(), gone.status(), &observed);
    let hash = MetadataWrite::SetSpecHash {
        hash: proxy_core::testing::hash(),
    };
    assert_eq!(next.metadata(), [hash, issue()]);
    assert!(matches!(
        next.provider_call(),
        Some(ProviderRequest::Create(_))
    ));
}

#[test]
fn deletion_revokes_before_the_finalizer_goes() {
    let gone = Observed::test()
        .with_credentials()
        .deleting()
        .instance(InstanceView::NotFound);
    let decision = decide(&managed_spec(), &deleting_status(), &gone);
    assert_eq!(
        decision.metadata(),
        [revoke(), MetadataWrite::RemoveFinalizer]
    );
    // Never created: a Secret an earlier attempt issued goes too.
    let never = Observed::test().with_credentials().deleting();
    let decision = decide(&managed_spec(), &creating_status(), &never);
    assert_eq!(
        decision.metadata(),
        [revoke(), MetadataWrite::RemoveFinalizer]
    );
    // While the instance exists, the credentials stay: it still runs.
    let present = Observed::test()
        .with_credentials()
        .deleting()
        .instance(InstanceView::Running {
            ip: "10.0.0.7".into(),
        });
    let decision = decide(&managed_spec(), &deleting_status(), &present);
    assert_eq!(decision.metadata(), []);
}

#[test]
fn external_proxies_are_never_issued_credentials() {
    // The shell never sets `credentials` for an External proxy; even if it did, nothing is
    // created or deleted for one.
    let observed = Observed::test().with_credentials().without_finalizer();
    let decision = decide(&external_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(decision.metadata(), []);
    assert_eq!(decision.provider_call(), None);
}
