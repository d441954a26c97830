"""Writing snapshots: conversion, shards, tasks, executors, lease, commit."""
