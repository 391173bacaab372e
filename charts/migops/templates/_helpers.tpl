{{/*
Each object of migops is a template of its own, under the folder of its component (webhook/,
reconciler/, agent/, monitoring/). The chart is the one hand-written source of migops's objects: the
static manifests in manifests/ are this chart rendered with the values files in manifests/values/
(`make generate`; docs/development/generated-files.md).
*/}}

{{/* The one image of every migops container: repository:tag, or repository@digest when pinned. */}}
{{- define "migops.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The labels Helm users filter by, beside every object's own app.kubernetes.io/name and part-of;
none with releaseLabels=false (the static manifests, which no Helm release manages). */}}
{{- define "migops.helmLabels" -}}
{{- if .Values.releaseLabels -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
{{- end -}}

{{/* An object's labels: (list $ "migops-webhook") -> the component's name, part-of and Helm's. */}}
{{- define "migops.labels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/part-of: migops
{{- with include "migops.helmLabels" $root }}
{{ . }}
{{- end }}
{{- end -}}

{{/* A migops container's image and pull policy. */}}
{{- define "migops.containerImage" -}}
image: {{ include "migops.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end -}}

{{/* A pod's placement from the component's values: (list $ .Values.webhook). */}}
{{- define "migops.placement" -}}
{{- $root := index . 0 -}}
{{- $c := index . 1 -}}
{{- with $c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The release namespace's Pod Security level: the agent on real GPUs is privileged (MIG changes need
root on the GPUs); simulated GPUs and the other modes need nothing more than `restricted`. */}}
{{- define "migops.podSecurity" -}}
{{- .Values.namespace.podSecurity | default (ternary "privileged" "restricted" (and (eq .Values.mode "agent") (eq .Values.agent.backend "nvml"))) -}}
{{- end -}}

{{/* Where the reconciler runs: modes agent and mig-manager. */}}
{{- define "migops.reconciler" -}}
{{- if ne .Values.mode "webhook-only" }}true{{ end -}}
{{- end -}}

{{/* What every admission webhook shares: (list $ "/validate"): the Service it calls and how. */}}
{{- define "migops.webhook.common" -}}
{{- $root := index . 0 -}}
admissionReviewVersions: [v1]
clientConfig:
  service: {name: migops-webhook, namespace: {{ $root.Release.Namespace }}, port: 443, path: {{ index . 1 }}}
matchPolicy: Equivalent
sideEffects: None
objectSelector: {}
{{- end -}}

{{/* Namespaces no webhook reviews: the control plane's, the release's own (Helm's --create-namespace
namespace carries no migops.io/webhook=skip label), and any labelled skip. A broken webhook cannot lock
migops out. */}}
{{- define "migops.webhook.namespaces" -}}
- key: kubernetes.io/metadata.name
  operator: NotIn
  values: [kube-system, kube-node-lease, {{ .Release.Namespace }}]
- key: migops.io/webhook
  operator: NotIn
  values: [skip]
{{- end -}}

{{/* certificates.mode=cert-manager: cainjector writes the caBundle from the serving Certificate. */}}
{{- define "migops.webhook.annotations" -}}
{{- if eq .Values.certificates.mode "cert-manager" -}}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/migops-webhook
{{- end -}}
{{- end -}}
