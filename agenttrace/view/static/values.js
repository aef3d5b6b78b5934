// agenttrace view: observations, actions, info and tool values in the codec's tagged JSON
// (agenttrace/trajectory/codec.py) rendered for reading. Image-shaped arrays are drawn on a
// <canvas>; other arrays show dtype, shape and their numbers (cut when huge).
"use strict";

(function (AT) {
  const { h } = AT;

  // Cuts for huge values.
  const MAX_ITEMS = 50; // items shown per list / array dimension
  const MAX_NUMBERS = 2000; // numbers shown per array
  const MAX_TEXT = 4000; // characters of a string before "show all"

  function isTagged(value) {
    if (!value || typeof value !== "object" || Array.isArray(value)) return false;
    const keys = Object.keys(value);
    return keys.length === 1 && keys[0].startsWith("$");
  }

  // ---- $ndarray ----------------------------------------------------------------------

  const SIZES = { b: 1, i: 0, u: 0, f: 0 };

  // Raw C-order bytes (base64) -> a flat array of numbers (or booleans), by numpy dtype str
  // such as "<f4", "|u1", ">i8", "|b1". null when the dtype is not numeric.
  function decodeB64(b64, dtype) {
    const match = /^([<>|=])([biuf])(\d+)$/.exec(dtype || "");
    if (!match || !(match[2] in SIZES)) return null;
    const little = match[1] !== ">";
    const kind = match[2];
    const size = Number(match[3]);
    const binary = atob(b64);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    const view = new DataView(bytes.buffer);
    const count = Math.floor(bytes.length / size);
    const out = new Array(count);
    const read = reader(view, kind, size, little);
    if (!read) return null;
    for (let i = 0; i < count; i++) out[i] = read(i * size);
    return kind === "b" ? out.map((v) => v !== 0) : out;
  }

  function reader(view, kind, size, little) {
    if (kind === "f") {
      if (size === 8) return (at) => view.getFloat64(at, little);
      if (size === 4) return (at) => view.getFloat32(at, little);
      if (size === 2) return (at) => half(view.getUint16(at, little));
      return null;
    }
    if (kind === "b" || size === 1) {
      return kind === "i" ? (at) => view.getInt8(at) : (at) => view.getUint8(at);
    }
    const signed = kind === "i";
    if (size === 2) return signed ? (at) => view.getInt16(at, little) : (at) => view.getUint16(at, little);
    if (size === 4) return signed ? (at) => view.getInt32(at, little) : (at) => view.getUint32(at, little);
    if (size === 8) {
      return signed
        ? (at) => Number(view.getBigInt64(at, little))
        : (at) => Number(view.getBigUint64(at, little));
    }
    return null;
  }

  function half(bits) {
    const sign = bits & 0x8000 ? -1 : 1;
    const exp = (bits >> 10) & 0x1f;
    const frac = bits & 0x3ff;
    if (exp === 0) return sign * Math.pow(2, -14) * (frac / 1024);
    if (exp === 31) return frac ? NaN : sign * Infinity;
    return sign * Math.pow(2, exp - 15) * (1 + frac / 1024);
  }

  function flatten(data, out) {
    if (Array.isArray(data)) for (const item of data) flatten(item, out);
    else out.push(data);
    return out;
  }

  // {dtype, shape, data|b64} -> {dtype, shape, flat: [...] | null}
  function ndarrayValues(body) {
    const shape = Array.isArray(body.shape) ? body.shape : [];
    let flat = null;
    if (Array.isArray(body.data)) flat = flatten(body.data, []);
    else if (shape.length === 0 && body.data !== undefined) flat = [body.data];
    else if (typeof body.b64 === "string") flat = decodeB64(body.b64, body.dtype);
    return { dtype: String(body.dtype), shape, flat };
  }

  // Image-shaped: 2-D, or 3-D with 1, 3 or 4 channels; uint8 (0..255) or floats in 0..1.
  function imageLayout(arr) {
    const { shape, flat, dtype } = arr;
    if (!flat) return null;
    let height, width, channels;
    if (shape.length === 2) [height, width, channels] = [shape[0], shape[1], 1];
    else if (shape.length === 3 && [1, 3, 4].includes(shape[2])) [height, width, channels] = shape;
    else return null;
    if (!(height > 0 && width > 0) || flat.length !== height * width * channels) return null;
    const kind = dtype.replace(/^[<>|=]/, "");
    let scale;
    if (kind === "u1") scale = 1;
    else if (/^f\d+$/.test(kind)) {
      for (const v of flat) if (!(v >= 0 && v <= 1)) return null;
      scale = 255;
    } else return null;
    return { height, width, channels, scale };
  }

  function drawImage(arr, layout) {
    const { height, width, channels, scale } = layout;
    const canvas = h("canvas", {
      class: "ndarray-image",
      "data-testid": "ndarray-image",
      "data-shape": arr.shape.join("x"),
      "data-dtype": arr.dtype,
      width,
      height,
      title: `${arr.dtype} ${arr.shape.join("×")}`,
    });
    const context = canvas.getContext("2d");
    const image = context.createImageData(width, height);
    const pixels = image.data;
    const flat = arr.flat;
    for (let p = 0; p < width * height; p++) {
      const o = p * 4;
      const i = p * channels;
      if (channels === 1) {
        const g = Math.round(flat[i] * scale);
        pixels[o] = pixels[o + 1] = pixels[o + 2] = g;
        pixels[o + 3] = 255;
      } else {
        pixels[o] = Math.round(flat[i] * scale);
        pixels[o + 1] = Math.round(flat[i + 1] * scale);
        pixels[o + 2] = Math.round(flat[i + 2] * scale);
        pixels[o + 3] = channels === 4 ? Math.round(flat[i + 3] * scale) : 255;
      }
    }
    context.putImageData(image, 0, 0);
    // Shown at a readable size: small images scaled up by whole pixels, big ones down.
    const zoom = Math.max(1, Math.min(8, Math.floor(192 / Math.max(width, height))));
    const shownWidth = Math.min(width * zoom, 384);
    canvas.style.width = shownWidth + "px";
    canvas.style.height = Math.round((shownWidth * height) / width) + "px";
    return canvas;
  }

  // Nested numbers of a flat C-order array, cut at MAX_ITEMS per dimension.
  function nestedText(flat, shape) {
    let budget = MAX_NUMBERS;
    const strides = [];
    let stride = 1;
    for (let d = shape.length - 1; d >= 0; d--) {
      strides[d] = stride;
      stride *= shape[d];
    }
    function level(d, offset) {
      if (d === shape.length) {
        budget--;
        return scalarText(flat[offset]);
      }
      const parts = [];
      const n = shape[d];
      for (let i = 0; i < n; i++) {
        if (i >= MAX_ITEMS || budget <= 0) {
          parts.push(`… ${n - i} more`);
          break;
        }
        parts.push(level(d + 1, offset + i * strides[d]));
      }
      const sep = d === shape.length - 1 ? ", " : ",\n" + " ".repeat(d + 1);
      return "[" + parts.join(sep) + "]";
    }
    return level(0, 0);
  }

  function scalarText(value) {
    if (typeof value === "number") return AT.fmtNum(value, 6);
    return JSON.stringify(value);
  }

  function renderNdarray(body) {
    const arr = ndarrayValues(body);
    const label = `ndarray ${arr.dtype} [${arr.shape.join(", ")}]`;
    const box = h("div", {
      class: "value ndarray",
      "data-testid": "ndarray",
      "data-dtype": arr.dtype,
      "data-shape": arr.shape.join("x"),
    });
    box.appendChild(h("div", { class: "value-type" }, label));
    const layout = imageLayout(arr);
    if (layout) {
      box.appendChild(drawImage(arr, layout));
      return box;
    }
    if (!arr.flat) {
      box.appendChild(h("pre", { class: "json" }, JSON.stringify(body, null, 1).slice(0, MAX_TEXT)));
      return box;
    }
    const objectArray = arr.dtype.endsWith("O") || arr.dtype.startsWith("|O");
    const shape = objectArray ? [arr.flat.length] : arr.shape;
    box.appendChild(h("pre", { class: "array-numbers" }, nestedText(arr.flat, shape)));
    return box;
  }

  // ---- other tags -----------------------------------------------------------------------

  function renderTagged(value, depth) {
    const tag = Object.keys(value)[0];
    const body = value[tag];
    if (tag === "$ndarray" && body && typeof body === "object") return renderNdarray(body);
    if (tag === "$numpy" && body && typeof body === "object" && "value" in body) {
      return h(
        "span",
        { class: "value numpy", "data-testid": "numpy-value", title: `numpy ${body.dtype}` },
        renderValue(body.value, depth + 1),
        h("span", { class: "value-type" }, ` ${body.dtype}`)
      );
    }
    if (tag === "$float" && typeof body === "string") {
      return h("span", { class: "value number" }, body);
    }
    if ((tag === "$tuple" || tag === "$set" || tag === "$frozenset") && Array.isArray(body)) {
      return h(
        "div",
        { class: "value tagged" },
        h("span", { class: "value-type" }, tag.slice(1)),
        renderList(body, depth)
      );
    }
    return h("pre", { class: "value json", "data-testid": "tagged-json" }, jsonText(value));
  }

  function jsonText(value) {
    const text = JSON.stringify(value, null, 2);
    return text.length > MAX_TEXT ? text.slice(0, MAX_TEXT) + `\n… (${text.length} characters)` : text;
  }

  // ---- plain JSON ---------------------------------------------------------------------------

  function renderString(text) {
    if (text.length <= MAX_TEXT) {
      return h("span", { class: "value string" + (text.includes("\n") ? " multiline" : "") }, text);
    }
    const node = h("span", { class: "value string multiline" }, text.slice(0, MAX_TEXT) + " …");
    node.appendChild(
      h(
        "button",
        {
          class: "link",
          type: "button",
          onclick: (event) => {
            event.stopPropagation();
            AT.clear(node).appendChild(document.createTextNode(text));
          },
        },
        `show all ${text.length} characters`
      )
    );
    return node;
  }

  function renderList(items, depth) {
    if (items.every((v) => v === null || typeof v !== "object") && items.length <= MAX_ITEMS) {
      return h("span", { class: "value inline-list" }, "[" + items.map(scalarText).join(", ") + "]");
    }
    const list = h("ol", { class: "value list", start: 0 });
    items.slice(0, MAX_ITEMS).forEach((item) => list.appendChild(h("li", null, renderValue(item, depth + 1))));
    if (items.length > MAX_ITEMS) list.appendChild(h("li", { class: "more" }, `… ${items.length - MAX_ITEMS} more`));
    return list;
  }

  function renderObject(value, depth) {
    const entries = Object.entries(value);
    if (!entries.length) return h("span", { class: "value empty" }, "{}");
    const table = h("table", { class: "value object" });
    for (const [key, item] of entries.slice(0, MAX_ITEMS * 4)) {
      table.appendChild(h("tr", null, h("th", null, key), h("td", null, renderValue(item, depth + 1))));
    }
    if (entries.length > MAX_ITEMS * 4) {
      table.appendChild(h("tr", null, h("td", { colspan: 2, class: "more" }, `… ${entries.length - MAX_ITEMS * 4} more keys`)));
    }
    return table;
  }

  function renderValue(value, depth = 0) {
    if (value === null || value === undefined) return h("span", { class: "value null" }, "null");
    if (typeof value === "boolean") return h("span", { class: "value bool" }, String(value));
    if (typeof value === "number") return h("span", { class: "value number" }, scalarText(value));
    if (typeof value === "string") return renderString(value);
    if (depth > 12) return h("pre", { class: "value json" }, jsonText(value));
    if (Array.isArray(value)) return renderList(value, depth);
    if (isTagged(value)) return renderTagged(value, depth);
    return renderObject(value, depth);
  }

  // Short one-line text of a value (tables, compare rows).
  function summary(value, limit = 120) {
    let text;
    if (typeof value === "string") text = value;
    else if (isTagged(value) && value.$ndarray) {
      const b = value.$ndarray;
      const small = Array.isArray(b.data) && flatten(b.data, []).length <= 32;
      text = small ? JSON.stringify(b.data) : `ndarray ${b.dtype} [${(b.shape || []).join(", ")}]`;
    } else if (isTagged(value) && value.$numpy && "value" in value.$numpy) {
      text = JSON.stringify(value.$numpy.value);
    } else text = JSON.stringify(value);
    if (text === undefined) text = "null";
    return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
  }

  AT.values = { renderValue, summary, ndarrayValues, imageLayout, decodeB64, isTagged };
})(window.AT);
