{{/*
hookrelay.fullname names every object: <release>-hookrelay, or the release
name when it already holds the chart's name. At most 45 characters, so that
"-receiver-metrics" still fits a Service name's 63.
*/}}
{{- define "hookrelay.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hookrelay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* hookrelay.labels are on every object. */}}
{{- define "hookrelay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "hookrelay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
hookrelay.selectorLabels select one component's pods; call with
(dict "root" $ "component" "receiver").
*/}}
{{- define "hookrelay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookrelay.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "hookrelay.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* hookrelay.secretName is the Secret the pods take their environment from. */}}
{{- define "hookrelay.secretName" -}}
{{- default (include "hookrelay.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{/*
hookrelay.seconds turns a Go duration as config.yaml takes it ("30s",
"1m30s", "1500ms", "1d") into whole seconds, rounded up; anything else
fails the render. Call with (dict "key" "config.x.y" "value" "30s").
*/}}
{{- define "hookrelay.seconds" -}}
{{- $d := toString .value -}}
{{- $parts := regexFindAll "[0-9]+(\\.[0-9]+)?(d|h|ms|m|s|us|µs|ns)" $d -1 -}}
{{- if or (not $parts) (ne (join "" $parts) $d) -}}
{{- fail (printf "%s: %q is not a duration (a number and a unit: 30s, 1m30s, 1500ms)" .key $d) -}}
{{- end -}}
{{- $scale := dict "d" 86400.0 "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "ns" 0.000000001 -}}
{{- $total := 0.0 -}}
{{- range $parts -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $total = addf $total (mulf (float64 $num) (get $scale (trimPrefix $num .))) -}}
{{- end -}}
{{- ceil $total | int -}}
{{- end -}}

{{/*
hookrelay.receiverGrace is the receiver's terminationGracePeriodSeconds:
the preStop wait, then the longer of its HTTP shutdown and an outbox
batch's confirms (the receiver waits for both, side by side), then the
margin.
*/}}
{{- define "hookrelay.receiverGrace" -}}
{{- $shutdown := include "hookrelay.seconds" (dict "key" "config.receiver.shutdown_timeout" "value" (dig "receiver" "shutdown_timeout" "10s" .Values.config)) | int -}}
{{- $publish := include "hookrelay.seconds" (dict "key" "config.outbox.publish_timeout" "value" (dig "outbox" "publish_timeout" "10s" .Values.config)) | int -}}
{{- add (int .Values.receiver.preStopSleepSeconds) (max $shutdown $publish) (int .Values.terminationGraceMarginSeconds) -}}
{{- end -}}

{{/*
hookrelay.dispatcherGrace is the dispatcher's terminationGracePeriodSeconds:
its shutdown_timeout, which in-flight deliveries get, then the margin.
*/}}
{{- define "hookrelay.dispatcherGrace" -}}
{{- $shutdown := include "hookrelay.seconds" (dict "key" "config.dispatcher.shutdown_timeout" "value" (dig "dispatcher" "shutdown_timeout" "30s" .Values.config)) | int -}}
{{- add $shutdown (int .Values.terminationGraceMarginSeconds) -}}
{{- end -}}

{{/*
hookrelay.checkValues fails the render on values that would put a secret
into the ConfigMap, give the tables' owner to the long-running pods, or
leave a required URL unset.
*/}}
{{- define "hookrelay.checkValues" -}}
{{- $c := .Values.config -}}
{{- range $key := list "url" "migrate_url" -}}
{{- if hasKey (default (dict) $c.database) $key -}}
{{- fail (printf "config.database.%s carries a password: set it in secrets (or existingSecret) as HOOKRELAY_DATABASE_%s instead" $key (upper $key)) -}}
{{- end -}}
{{- end -}}
{{- range $key := list "url" "urls" -}}
{{- if hasKey (default (dict) $c.amqp) $key -}}
{{- fail (printf "config.amqp.%s carries a password: set it in secrets (or existingSecret) as HOOKRELAY_AMQP_%s instead" $key (upper $key)) -}}
{{- end -}}
{{- end -}}
{{- if or (hasKey (default (dict) $c.secrets) "key") (hasKey (default (dict) $c.secrets) "previous_keys") -}}
{{- fail "config.secrets.key and previous_keys are keys: set them in secrets (or existingSecret) as HOOKRELAY_SECRETS_KEY and HOOKRELAY_SECRETS_PREVIOUS_KEYS instead" -}}
{{- end -}}
{{- if hasKey (default (dict) $c.admin) "token" -}}
{{- fail "config.admin.token is a credential: set it in secrets (or existingSecret) as HOOKRELAY_ADMIN_TOKEN instead" -}}
{{- end -}}
{{- $ref := "^\\$\\{[A-Za-z_][A-Za-z0-9_]*\\}$" -}}
{{- range $i, $s := (default (list) $c.sources) -}}
{{- range $j, $v := (default (list) (dig "verify" "secrets" (list) $s)) -}}
{{- if not (regexMatch $ref (toString $v)) -}}
{{- fail (printf "config.sources[%d].verify.secrets[%d] must be a ${VAR} reference to a key of the Secret, not the secret itself" $i $j) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $i, $r := (default (list) $c.routes) -}}
{{- if and (hasKey $r "signing_secret") (not (regexMatch $ref (toString $r.signing_secret))) -}}
{{- fail (printf "config.routes[%d].signing_secret must be a ${VAR} reference to a key of the Secret, not the secret itself" $i) -}}
{{- end -}}
{{- range $j, $v := (default (list) $r.signing_secrets) -}}
{{- if not (regexMatch $ref (toString $v)) -}}
{{- fail (printf "config.routes[%d].signing_secrets[%d] must be a ${VAR} reference to a key of the Secret, not the secret itself" $i $j) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if hasKey .Values.secrets "HOOKRELAY_DATABASE_MIGRATE_URL" -}}
{{- fail "secrets.HOOKRELAY_DATABASE_MIGRATE_URL would reach every pod: set migration.databaseURL instead (only the migration Job gets it)" -}}
{{- end -}}
{{- if not .Values.existingSecret -}}
{{- range $k, $v := .Values.secrets -}}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*$" $k) -}}
{{- fail (printf "secrets.%s: a key must be an environment variable's name" $k) -}}
{{- end -}}
{{- end -}}
{{- if not .Values.secrets.HOOKRELAY_DATABASE_URL -}}
{{- fail "secrets.HOOKRELAY_DATABASE_URL is required (or name a Secret holding it in existingSecret)" -}}
{{- end -}}
{{- if not (or .Values.secrets.HOOKRELAY_AMQP_URL .Values.secrets.HOOKRELAY_AMQP_URLS) -}}
{{- fail "secrets.HOOKRELAY_AMQP_URL (or HOOKRELAY_AMQP_URLS) is required (or name a Secret holding it in existingSecret)" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* hookrelay.configYAML is config.yaml, as the ConfigMaps carry it. */}}
{{- define "hookrelay.configYAML" -}}
# Rendered by the hookrelay chart from .Values.config. The listen addresses
# and every credential come from the environment (HOOKRELAY_* overrides and
# ${VAR} references).
{{ toYaml .Values.config }}
{{- end -}}

{{/* hookrelay.volumes are every pod's: config.yaml and a writable /tmp. */}}
{{- define "hookrelay.volumes" -}}
- name: config
  configMap:
    name: {{ .configMap }}
    items:
      - key: config.yaml
        path: config.yaml
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "hookrelay.volumeMounts" -}}
- name: config
  mountPath: /etc/hookrelay
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end -}}
