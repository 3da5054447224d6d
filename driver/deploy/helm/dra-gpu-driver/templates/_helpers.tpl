{{/* Name of the release's objects: the release name, prefixed with the chart's unless it has it. */}}
{{- define "dra-gpu-driver.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "dra-gpu-driver.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dra-gpu-driver.labels" -}}
{{ include "dra-gpu-driver.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The domain the DeviceClass names share: "gpu.example.com" -> "example.com". */}}
{{- define "dra-gpu-driver.classDomain" -}}
{{- trimPrefix "gpu." .Values.driverName -}}
{{- end -}}
