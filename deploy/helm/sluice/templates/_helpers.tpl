{{/* Names, labels and the checks of the values every template runs. */}}

{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The policy as YAML text: values' policy is a string or an object. */}}
{{- define "sluice.policy" -}}
{{- if kindIs "string" .Values.policy }}
{{- .Values.policy }}
{{- else }}
{{- toYaml .Values.policy }}
{{- end }}
{{- end }}

{{/* Whether the chart makes its own Secret ("true" or ""). */}}
{{- define "sluice.ownSecret" -}}
{{- if and (not .Values.existingSecret) (or .Values.auth.enabled .Values.auth.adminEnabled (eq .Values.store.type "redis")) }}true{{ end }}
{{- end }}

{{/* The Secret the pods read: existingSecret or the chart's. */}}
{{- define "sluice.secretName" -}}
{{- default (include "sluice.fullname" .) .Values.existingSecret }}
{{- end }}

{{/*
sluice.validate fails the rendering on values that cannot work, with a
message naming them. Every template includes it, so `helm template`,
`helm install` and `helm lint` all stop on it.
*/}}
{{- define "sluice.validate" -}}
{{- $v := .Values }}
{{- if not (has $v.store.type (list "memory" "redis")) }}
{{- fail (printf "store.type %q: must be memory or redis" $v.store.type) }}
{{- end }}
{{- if eq $v.store.type "memory" }}
{{- if or (ne (int $v.replicaCount) 1) $v.autoscaling.enabled }}
{{- fail (printf "store.type memory keeps the limit state in each pod, so it needs replicaCount: 1 and autoscaling.enabled: false (got replicaCount: %v, autoscaling.enabled: %v); set store.type: redis with store.redis.url (or existingSecret) to run more pods" $v.replicaCount $v.autoscaling.enabled) }}
{{- end }}
{{- end }}
{{- if and (eq $v.store.type "redis") (not $v.existingSecret) (not $v.store.redis.url) }}
{{- fail "store.type redis needs store.redis.url (redis://host:6379) or existingSecret (a Secret with the key redis-url)" }}
{{- end }}
{{- if and $v.auth.enabled (not $v.existingSecret) (not $v.auth.token) }}
{{- fail "auth.enabled needs auth.token or existingSecret (a Secret with the key auth-token)" }}
{{- end }}
{{- if and $v.auth.adminEnabled (not $v.existingSecret) (not $v.auth.adminToken) }}
{{- fail "auth.adminEnabled needs auth.adminToken or existingSecret (a Secret with the key admin-token)" }}
{{- end }}
{{- if lt (int $v.terminationGracePeriodSeconds) (add (int $v.preStopSleepSeconds) 15) }}
{{- fail (printf "terminationGracePeriodSeconds %v must be at least preStopSleepSeconds (%v) + 15, sluice serve's shutdown drain" $v.terminationGracePeriodSeconds $v.preStopSleepSeconds) }}
{{- end }}
{{- if not (has (toString $v.podAntiAffinity) (list "soft" "hard" "")) }}
{{- fail (printf "podAntiAffinity %q: must be soft, hard or empty" (toString $v.podAntiAffinity)) }}
{{- end }}
{{- if and $v.autoscaling.enabled (lt (int $v.autoscaling.maxReplicas) (int $v.autoscaling.minReplicas)) }}
{{- fail "autoscaling.maxReplicas must be at least autoscaling.minReplicas" }}
{{- end }}
{{- end }}
