{{/*
The chart's objects are the kustomize overlays of manifests/ (one per mode), rendered into files/ by
hack/chart-files.sh: one source of truth, which tests/helm/test_chart.py keeps equal. The templates
only set what values.yaml names, on the parsed objects.
*/}}

{{- define "migops.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* The labels Helm users filter by, beside the manifests' own app.kubernetes.io/name and part-of. */}}
{{- define "migops.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Which component (webhook, reconciler, agent) an object belongs to, from its name. */}}
{{- define "migops.component" -}}
{{- $name := .metadata.name | default "" -}}
{{- if hasPrefix "migops-webhook" $name -}}webhook
{{- else if hasPrefix "migops-reconciler" $name -}}reconciler
{{- else if hasPrefix "migops-agent" $name -}}agent
{{- else -}}other
{{- end -}}
{{- end -}}

{{/* The overlay's text (with the cert-manager component when certificates.mode says so) with this release's names: the release namespace for migops-system, the GPU
Operator's namespace and the MIG ConfigMap's name. Each is a whole token in the rendered overlays
(tests/helm checks that no other occurrence exists). */}}
{{- define "migops.source" -}}
{{- $suffix := ternary "+cert-manager" "" (eq .Values.certificates.mode "cert-manager") -}}
{{- $text := .Files.Get (printf "files/%s%s.yaml" .Values.mode $suffix) -}}
{{- $text = $text | replace "migops-mig-config" .Values.migConfigMap.name -}}
{{- $text = $text | replace "namespace: gpu-operator" (printf "namespace: %s" .Values.gpuOperator.namespace) -}}
{{- $text = $text | replace "request.namespace == ''gpu-operator''" (printf "request.namespace == ''%s''" .Values.gpuOperator.namespace) -}}
{{- $text = $text | replace "request.namespace == 'gpu-operator'" (printf "request.namespace == '%s'" .Values.gpuOperator.namespace) -}}
{{- $text = $text | replace "migops-system" .Release.Namespace -}}
{{- $text -}}
{{- end -}}

{{/* The config repo's credentials, each from a Secret or ConfigMap the user names (never values). */}}
{{- define "migops.reconcilerCredentials" -}}
{{- $pod := .pod -}}
{{- $repo := .repo -}}
{{- $main := index $pod.containers 0 -}}
{{- $args := default (list) $main.args -}}
{{- $mounts := default (list) $main.volumeMounts -}}
{{- $volumes := default (list) $pod.volumes -}}
{{- if $repo.sshSecret -}}
  {{- $args = concat $args (list "--ssh-key=/etc/migops/git/identity" "--known-hosts=/etc/migops/git/known_hosts") -}}
  {{- $mounts = append $mounts (dict "name" "git-ssh" "mountPath" "/etc/migops/git" "readOnly" true) -}}
  {{- $volumes = append $volumes (dict "name" "git-ssh" "secret" (dict "secretName" $repo.sshSecret "defaultMode" 288)) -}}
  {{- $_ := set $pod.securityContext "fsGroup" 65532 -}}
{{- end -}}
{{- if $repo.httpsSecret -}}
  {{- $args = append $args "--https-password-file=/etc/migops/git-https/password" -}}
  {{- if $repo.httpsUsername -}}{{- $args = append $args (printf "--https-username=%s" $repo.httpsUsername) -}}{{- end -}}
  {{- $mounts = append $mounts (dict "name" "git-https" "mountPath" "/etc/migops/git-https" "readOnly" true) -}}
  {{- $volumes = append $volumes (dict "name" "git-https" "secret" (dict "secretName" $repo.httpsSecret "defaultMode" 288)) -}}
  {{- $_ := set $pod.securityContext "fsGroup" 65532 -}}
{{- end -}}
{{- if $repo.caConfigMap -}}
  {{- $args = append $args "--ca-file=/etc/migops/git-ca/ca.crt" -}}
  {{- $mounts = append $mounts (dict "name" "git-ca" "mountPath" "/etc/migops/git-ca" "readOnly" true) -}}
  {{- $volumes = append $volumes (dict "name" "git-ca" "configMap" (dict "name" $repo.caConfigMap)) -}}
{{- end -}}
{{- range $flag, $ref := dict "--allowed-signers" $repo.verify.allowedSignersFrom "--trusted-key" $repo.verify.trustedKeysFrom -}}
  {{- if and $ref $ref.kind $ref.name -}}
    {{- $volume := printf "verify-%s" ($flag | trimPrefix "-" | trimPrefix "-") -}}
    {{- $dir := printf "/etc/migops/%s" $volume -}}
    {{- $args = append $args (printf "%s=%s/%s" $flag $dir $ref.key) -}}
    {{- $mounts = append $mounts (dict "name" $volume "mountPath" $dir "readOnly" true) -}}
    {{- $items := list (dict "key" $ref.key "path" $ref.key) -}}
    {{- if eq $ref.kind "Secret" -}}
      {{- $volumes = append $volumes (dict "name" $volume "secret" (dict "secretName" $ref.name "items" $items)) -}}
    {{- else -}}
      {{- $volumes = append $volumes (dict "name" $volume "configMap" (dict "name" $ref.name "items" $items)) -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- $_ := set $main "args" $args -}}
{{- $_ := set $main "volumeMounts" $mounts -}}
{{- $_ := set $pod "volumes" $volumes -}}
{{- end -}}
