//! instances.list and instances.aggregatedList: a label filter ([`Filter`]), pages of at most
//! `maxResults` (500 at most, as GCE) after an opaque `pageToken`, no `items` when nothing
//! matches, and an aggregated answer with every zone under `zones/<zone>`, as GCE's.

use serde_json::{Value, json};

use super::errors::GceError;
use super::filter::Filter;
use super::store::{Key, State, Store};

/// GCE caps a page at 500 results.
const MAX_PAGE: usize = 500;

/// One page of instances: each one's zone and body, and the next page's token.
type Served = (Vec<(String, Value)>, Option<String>);

/// One page request: at most `max_results` items after `token`.
#[derive(Debug, Default)]
pub(super) struct Page {
    pub max_results: Option<usize>,
    pub token: Option<String>,
}

impl Page {
    /// The first key after the page token (`zone/name` of the last item served). The
    /// client's paginator sends an empty token for the first page.
    fn after(&self) -> Result<Option<Key>, GceError> {
        self.token
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(|t| {
                t.split_once('/')
                    .map(|(z, n)| (z.to_owned(), n.to_owned()))
                    .ok_or_else(|| GceError::invalid("pageToken", t, "Invalid page token."))
            })
            .transpose()
    }

    fn size(&self) -> usize {
        self.max_results
            .filter(|&n| n > 0)
            .unwrap_or(MAX_PAGE)
            .min(MAX_PAGE)
    }
}

impl Store {
    /// The instances `filter` passes in the zones `zones`, one page of them, and the next
    /// page token.
    fn page(
        &self,
        state: &State,
        zones: &[&str],
        filter: &Filter,
        page: &Page,
    ) -> Result<Served, GceError> {
        let after = page.after()?;
        let mut matching = state
            .instances
            .iter()
            .filter(|((zone, _), _)| zones.contains(&zone.as_str()))
            .filter(|(key, _)| after.as_ref().is_none_or(|after| *key > after))
            .filter(|(_, i)| filter.matches(&i.labels) && self.visible(i, state));
        let items: Vec<_> = matching
            .by_ref()
            .take(page.size())
            .map(|((zone, name), i)| ((zone.clone(), name.clone()), self.render(i)))
            .collect();
        let next = match (matching.next(), items.last()) {
            (Some(_), Some(((zone, name), _))) => Some(format!("{zone}/{name}")),
            _ => None,
        };
        Ok((items.into_iter().map(|((z, _), v)| (z, v)).collect(), next))
    }

    /// instances.list.
    pub fn list(&self, zone: &str, filter: &Filter, page: &Page) -> Result<Value, GceError> {
        let state = self.lock();
        let (items, next) = self.page(&state, &[zone], filter, page)?;
        let mut body = json!({
            "kind": "compute#instanceList",
            "id": format!("projects/{}/zones/{zone}/instances", self.options().project),
            "selfLink": format!("{}/instances", self.zone_url(zone)),
        });
        if !items.is_empty() {
            body["items"] = items.into_iter().map(|(_, v)| v).collect();
        }
        if let Some(next) = next {
            body["nextPageToken"] = json!(next);
        }
        Ok(body)
    }

    /// instances.aggregatedList: every zone under `zones/<zone>`, with `instances` or a
    /// warning, as GCE answers. An unreachable zone fails the call unless the caller accepts
    /// partial success; then it is listed in `unreachables`.
    pub fn aggregated_list(
        &self,
        filter: &Filter,
        page: &Page,
        partial_success: bool,
    ) -> Result<Value, GceError> {
        let state = self.lock();
        let project = &self.options().project;
        if let (Some(zone), false) = (state.unreachable.first(), partial_success) {
            return Err(GceError::unreachable(&format!(
                "projects/{project}/zones/{zone}"
            )));
        }
        let reachable: Vec<&str> = self
            .options()
            .zones
            .iter()
            .map(String::as_str)
            .filter(|z| !state.unreachable.contains(*z))
            .collect();
        let (found, next) = self.page(&state, &reachable, filter, page)?;
        let mut items = serde_json::Map::new();
        for zone in &self.options().zones {
            let scope = format!("zones/{zone}");
            let instances: Vec<Value> = found
                .iter()
                .filter(|(z, _)| z == zone)
                .map(|(_, v)| v.clone())
                .collect();
            let entry = if state.unreachable.contains(zone) {
                warning(
                    "UNREACHABLE",
                    &format!("The resource 'projects/{project}/zones/{zone}' is unreachable."),
                    &scope,
                )
            } else if instances.is_empty() {
                warning(
                    "NO_RESULTS_ON_PAGE",
                    &format!("There are no results for scope '{scope}' on this page."),
                    &scope,
                )
            } else {
                json!({"instances": instances})
            };
            items.insert(scope, entry);
        }
        let mut body = json!({
            "kind": "compute#instanceAggregatedList",
            "id": format!("projects/{project}/aggregated/instances"),
            "items": items,
            "selfLink": format!("https://www.googleapis.com/compute/v1/projects/{project}/aggregated/instances"),
        });
        if let Some(next) = next {
            body["nextPageToken"] = json!(next);
        }
        if !state.unreachable.is_empty() {
            body["unreachables"] = state
                .unreachable
                .iter()
                .map(|z| json!(format!("zones/{z}")))
                .collect();
        }
        Ok(body)
    }
}

fn warning(code: &str, message: &str, scope: &str) -> Value {
    json!({"warning": {"code": code, "message": message, "data": [{"key": "scope", "value": scope}]}})
}
