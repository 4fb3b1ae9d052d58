"""Rank agreement for the planner's validation scripts: Spearman's rank correlation (ties share
their mean rank) and the pairs a prediction orders against the measurement."""
import statistics


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5


def discordant_pairs(measured, predicted, resolution):
    """(pairs ordered wrongly, pairs compared): only the pairs whose measured values differ by more
    than `resolution` (relative) are compared; closer ones are within the measurement's noise."""
    wrong = compared = 0
    for i in range(len(measured)):
        for j in range(i + 1, len(measured)):
            low, high = sorted((measured[i], measured[j]))
            if high <= low * (1 + resolution):
                continue
            compared += 1
            if (measured[i] - measured[j]) * (predicted[i] - predicted[j]) <= 0:
                wrong += 1
    return wrong, compared
