{{/* Labels of every object: the kustomize base's, then Helm's own. */}}
{{- define "ghostip.labels" -}}
app.kubernetes.io/part-of: ghostip
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The image of both components. */}}
{{- define "ghostip.image" -}}
{{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The port of a listen address (`HOST:PORT`, `[V6]:PORT`, `$(HOST_IP):PORT`). */}}
{{- define "ghostip.port" -}}
{{- $port := regexFind ":[0-9]+$" . | trimPrefix ":" -}}
{{- if not $port -}}{{- fail (printf "listen address %q has no port" .) -}}{{- end -}}
{{ $port }}
{{- end }}

{{/* The agent's PriorityClass name. */}}
{{- define "ghostip.agentPriorityClass" -}}
{{ default "ghostip-agent" .Values.agent.priorityClassName }}
{{- end }}
