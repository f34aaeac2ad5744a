{{/* The name of every object, unless a release name says otherwise. */}}
{{- define "proxy-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What selects the operator's Pods. */}}
{{- define "proxy-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "proxy-operator.labels" -}}
{{ include "proxy-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: proxy-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The Secret that holds the discovery token, and its key. */}}
{{- define "proxy-operator.tokenSecret" -}}
{{- .Values.discoveryToken.existingSecret | default (printf "%s-discovery-token" (include "proxy-operator.fullname" .)) -}}
{{- end -}}

{{/* "true" when a provider of type $type is configured: its RBAC is granted only then. */}}
{{- define "proxy-operator.hasProvider" -}}
{{- $found := false -}}
{{- range .root.Values.providers -}}
{{- if eq .type $.type -}}{{- $found = true -}}{{- end -}}
{{- end -}}
{{- $found -}}
{{- end -}}

{{/* The image reference: the tag defaults to the chart's appVersion, and the variant (kvm)
is appended to it. A kvm provider fails the render unless the image is the kvm variant. */}}
{{- define "proxy-operator.image" -}}
{{- range .Values.providers -}}
{{- if and (eq .type "kvm") (ne $.Values.image.variant "kvm") -}}
{{- fail (printf "provider %s is of type kvm: set image.variant=kvm (the default image has no kvm provider, no libvirt and no ssh)" .name) -}}
{{- end -}}
{{- end -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- with .Values.image.variant -}}{{- $tag = printf "%s-%s" $tag . -}}{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* Where the gcp key file of gcp.credentialsSecret is mounted. */}}
{{- define "proxy-operator.gcpCredentialsDir" -}}
/var/run/secrets/proxy-operator/gcp
{{- end -}}

{{/* What selects the gateway's Pods: a name of its own, so that no selector of the
operator's (its Deployment, its Services, its PodDisruptionBudget) takes them. */}}
{{- define "proxy-operator.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The Secret that holds the gateway's tenants (one key per tenant, its token the value). */}}
{{- define "proxy-operator.tenantsSecret" -}}
{{- .Values.gateway.tenants.existingSecret | default (printf "%s-gateway-tenants" (include "proxy-operator.fullname" .)) -}}
{{- end -}}
