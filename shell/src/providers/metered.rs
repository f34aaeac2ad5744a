//! The one decorator every provider goes through: a tracing span per operation (with the
//! provider, the operation and the instance) and the `proxy_operator_provider_requests_total`
//! counter by provider, operation and result. A new provider gets both for free.

use std::sync::Arc;

use async_trait::async_trait;
use proxy_core::{CreateRequest, ProviderError};
use tracing::Instrument;

use super::{Instance, InstanceState, Provider};
use crate::metrics::Metrics;

/// A provider with metrics and tracing around every call.
#[derive(Debug)]
pub struct Metered {
    name: String,
    inner: Arc<dyn Provider>,
    metrics: Arc<Metrics>,
}

impl Metered {
    /// Wraps `inner`, known in the providers config as `name`.
    pub fn new(name: String, inner: Arc<dyn Provider>, metrics: Arc<Metrics>) -> Self {
        Self {
            name,
            inner,
            metrics,
        }
    }

    fn count<T>(&self, op: &'static str, result: &Result<T, ProviderError>) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(error) => error.class.label(),
        };
        self.metrics.provider_request(&self.name, op, outcome);
        if let Err(error) = result {
            tracing::warn!(provider = %self.name, op, class = outcome, message = %error.message, "provider call failed");
        }
    }
}

#[async_trait]
impl Provider for Metered {
    async fn create(&self, request: &CreateRequest) -> Result<String, ProviderError> {
        let span = tracing::info_span!("provider", provider = %self.name, op = "create", instance = %request.instance_name, proxy = %format!("{}/{}", request.namespace, request.name));
        let result = self.inner.create(request).instrument(span).await;
        self.count("create", &result);
        result
    }

    async fn get(&self, provider_id: &str) -> Result<InstanceState, ProviderError> {
        let span = tracing::info_span!("provider", provider = %self.name, op = "get", provider_id);
        let result = self.inner.get(provider_id).instrument(span).await;
        self.count("get", &result);
        result
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        let span =
            tracing::info_span!("provider", provider = %self.name, op = "delete", provider_id);
        let result = self.inner.delete(provider_id).instrument(span).await;
        self.count("delete", &result);
        result
    }

    async fn list_by_tag(&self) -> Result<Vec<Instance>, ProviderError> {
        let span = tracing::info_span!("provider", provider = %self.name, op = "list");
        let result = self.inner.list_by_tag().instrument(span).await;
        self.count("list", &result);
        result
    }
}
