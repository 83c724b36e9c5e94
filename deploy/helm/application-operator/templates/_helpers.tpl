{{/* The chart's name. */}}
{{- define "application-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Name of the release's objects, cluster-scoped ones included: the release name when it already contains the chart's
name (so the default release "application-operator" gives plain "application-operator"), else "<release>-<chart>".
Two releases therefore never share a ClusterRole.
*/}}
{{- define "application-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the release's pods; part of the Deployment's immutable selector, so never add to them. */}}
{{- define "application-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "application-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "application-operator.labels" -}}
{{ include "application-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The Lease the replicas elect a leader with. */}}
{{- define "application-operator.leaseName" -}}
{{- printf "%s-leader" (include "application-operator.fullname" .) -}}
{{- end -}}

{{/*
The admissionregistration version the finalizer policy is written in: finalizerPolicy.apiVersion when set, else v1 or
v1beta1, whichever the cluster serves MutatingAdmissionPolicy in (v1 first), else "" (not rendered).
*/}}
{{- define "application-operator.finalizerPolicyApiVersion" -}}
{{- if .Values.finalizerPolicy.enabled -}}
{{- if .Values.finalizerPolicy.apiVersion -}}
{{- .Values.finalizerPolicy.apiVersion -}}
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1beta1
{{- end -}}
{{- end -}}
{{- end -}}
